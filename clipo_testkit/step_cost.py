# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What the CLIPO step costs beside the logprob pass it rides on (GPU kit, tier 1 c; a benchmark).

CLIPO adds two things to an RL step: pooling inside the logprob forward (per
microbatch) and one `clipo_step` (head forward, DP gather, group loss, rewards,
AdamW). Both are timed here on one device at Qwen2.5-7B shapes (hidden 3584,
d = 2048, 8192 rows in groups of 16), beside the pass they ride on, which one GPU
cannot run whole for 8192 rows, so it enters two ways, each labelled in the table:

- measured: the output layer + fp32 log-softmax + gather (the logprob pass's own
  epilogue, vocab 152064) on one chunk of tokens, scaled linearly to all tokens;
- estimated: the whole forward's FLOPs (`models.flops.forward_flops`, which counts
  the full attention square: an upper bound) at the bf16 GEMM throughput measured here.

Times are medians of N with CUDA events on a GPU (perf_counter on CPU, for the
smoke run). One device holds every row: on DP ranks the logprob pass splits by DP
while the head's loss still spans the gathered batch. A table, never an assertion.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from clipo_megatron.models.arch import GPTArch

QWEN25_7B = GPTArch(
    vocab_size=152064, hidden_size=3584, num_layers=28, num_attention_heads=28,
    num_query_groups=4, ffn_hidden_size=18944, max_position_embeddings=32768,
    tie_embeddings=False, qkv_bias=True,
)  # fmt: skip


@dataclass(frozen=True)
class Shapes:
    arch: GPTArch
    rows: int = 8192  # rollouts in the step (512 prompts x 16)
    group: int = 16
    embed_dim: int = 2048
    prompt_len: int = 512
    response_len: int = 1024
    micro_batch: int = 4  # rows per logprob microbatch (padded layout)
    chunk_tokens: int = 4096  # tokens per measured output-layer chunk

    @property
    def seq(self) -> int:
        return self.prompt_len + self.response_len


QWEN7B_SHAPES = Shapes(QWEN25_7B)
TINY_SHAPES = Shapes(
    GPTArch(vocab_size=512, hidden_size=64, num_layers=2, num_attention_heads=4,
            num_query_groups=2, ffn_hidden_size=128),
    rows=64, group=16, embed_dim=16, prompt_len=8, response_len=24, chunk_tokens=256,
)  # fmt: skip  # the CPU smoke run


def median_ms(fn: Callable[[], object], *, repeats: int, warmup: int = 2, events: bool) -> float:
    """Median wall time of fn in ms: CUDA events around each call on a GPU, else perf_counter."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if events:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def _clipo_step_fn(sh: Shapes, device):
    from clipo_megatron.core import CLIPOConfig
    from clipo_megatron.megatron.clipo_step import clipo_step
    from clipo_megatron.megatron.head import build_contrastive_head
    from clipo_megatron.megatron.head_trainer import HeadTrainer
    from clipo_megatron.runner.model.model_builder import transformer_config

    arch = replace(sh.arch, num_layers=1)  # the config only shapes the head
    head = build_contrastive_head(
        transformer_config(arch), input_size=arch.hidden_size, embed_dim=sh.embed_dim
    ).to(device)
    trainer = HeadTrainer(head, CLIPOConfig(embed_dim=sh.embed_dim))
    gen = torch.Generator().manual_seed(0)
    pooled = torch.randn(sh.rows, arch.hidden_size, generator=gen).to(device)  # [B, H] fp32
    correct = (torch.rand(sh.rows, generator=gen) < 0.5).long().to(device)
    gids = torch.arange(sh.rows // sh.group).repeat_interleave(sh.group).to(device)
    sids = torch.arange(sh.rows).to(device)
    counter = iter(range(10**9))
    return lambda: clipo_step(trainer, pooled, correct, gids, sids, step=next(counter))


def _pool_fn(sh: Shapes, device):
    from clipo_megatron.megatron.pooling.microbatch_pooler import SAMPLE_IDX_KEY, MicrobatchPooler

    b, s = sh.micro_batch, sh.seq
    hidden = torch.randn(s, b, sh.arch.hidden_size).to(device, torch.bfloat16)  # [S, b, H]
    mask = torch.zeros(b, s, dtype=torch.bool)
    mask[:, sh.prompt_len :] = True
    meta = {
        SAMPLE_IDX_KEY: torch.arange(b).to(device),
        "token_mask": mask.to(device),
        "input_lengths": torch.full((b,), s).to(device),
    }

    def pool():
        pooler = MicrobatchPooler()
        for _ in pooler.tee([meta]):
            pooler.pool(hidden)
        return pooler.result()

    return pool


def _output_layer_fn(sh: Shapes, device, dtype):
    """One chunk of the logprob epilogue: logits = h W^T, fp32 log-softmax, gather the targets."""
    gen = torch.Generator().manual_seed(1)
    t, h, v = sh.chunk_tokens, sh.arch.hidden_size, sh.arch.vocab_size
    hidden = torch.randn(t, h, generator=gen).to(device, dtype)
    weight = (0.02 * torch.randn(v, h, generator=gen)).to(device, dtype)
    targets = torch.randint(0, v, (t, 1), generator=gen).to(device)

    def run():
        logits = hidden @ weight.T  # [T, V]
        return torch.log_softmax(logits.float(), -1).gather(-1, targets)

    return run


def _gemm_tflops(sh: Shapes, device, dtype, *, repeats: int, events: bool) -> float:
    """Throughput of the model's largest GEMM shape (MLP up-projection) on this device."""
    t, h, f = sh.chunk_tokens, sh.arch.hidden_size, sh.arch.ffn_hidden_size
    a = torch.randn(t, h).to(device, dtype)
    w = torch.randn(f, h).to(device, dtype)
    ms = median_ms(lambda: a @ w.T, repeats=repeats, events=events)
    return 2.0 * t * h * f / (ms * 1e-3) / 1e12


def step_cost(
    device, sh: Shapes = QWEN7B_SHAPES, *, repeats: int = 10, events: bool = False,
    dtype=torch.bfloat16,
) -> list[tuple[str, str, float]]:  # fmt: skip
    """(part, how it was obtained, ms) rows; `share_table` adds the shares."""
    from clipo_megatron.models.flops import forward_flops

    tokens = sh.rows * sh.seq
    chunks = tokens / sh.chunk_tokens
    microbatches = -(-sh.rows // sh.micro_batch)
    step_ms = median_ms(_clipo_step_fn(sh, device), repeats=repeats, events=events)
    pool_ms = median_ms(_pool_fn(sh, device), repeats=repeats, events=events)
    out_ms = median_ms(_output_layer_fn(sh, device, dtype), repeats=repeats, events=events)
    tflops = _gemm_tflops(sh, device, dtype, repeats=repeats, events=events)
    fwd_ms = forward_flops(sh.arch, sh.rows, sh.seq) / (tflops * 1e12) * 1e3
    n = f"median of {repeats}"
    return [
        (f"clipo_step, {sh.rows} rows (H {sh.arch.hidden_size} -> d {sh.embed_dim})", n, step_ms),
        (f"pooling, one microbatch [{sh.seq}, {sh.micro_batch}, H] bf16", n, pool_ms),
        (f"pooling, all {microbatches} microbatches", f"{n} x {microbatches}", pool_ms * microbatches),
        (
            f"output layer + log-softmax, {tokens} tokens (V {sh.arch.vocab_size})",
            f"{n} on {sh.chunk_tokens} tokens x {chunks:.0f}",
            out_ms * chunks,
        ),
        (
            f"logprob forward, {sh.rows} x {sh.seq} tokens",
            f"FLOP estimate at measured {tflops:.3g} TFLOP/s",
            fwd_ms,
        ),
    ]  # fmt: skip


def share_table(rows: list[tuple[str, str, float]]) -> str:
    """Markdown table; shares are of the logprob forward (the last row)."""
    base = rows[-1][2]
    lines = ["| part | how | ms | share of logprob forward |", "|---|---|---|---|"]
    for part, how, ms in rows:
        lines.append(f"| {part} | {how} | {ms:.3f} | {100 * ms / base:.2f} % |")
    return "\n".join(lines)
