# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The CLIPO capture from a bf16 logprob pass against the same pass in fp32 (GPU kit, tier 1 b).

NeMo-RL runs the logprob pass in bf16; the pooler hooked on the final norm
upcasts each microbatch's hidden states to fp32 before it sums them
(`MicrobatchPooler._store`). Whether that is good enough for the head is a
question of numbers, so this runs one Megatron-Core `GPTModel` twice from the
same weights, fp32 and bf16, pools with the `MicrobatchPooler` exactly as the
workers do, and steps the same fp32 head on both:

    pooled relative error   max_i ||p16_i - p32_i|| / ||p32_i||
    reward difference       max_i |r_CL(p16)_i - r_CL(p32)_i|

Tolerances, and why:
- bf16 keeps 8 significant bits: unit roundoff u = 2^-8 = 3.9e-3 (~2.4 decimal digits).
  The final-norm output is rounded to bf16 (<= u per element) on top of the error the
  layers below carried in; the pooled mean averages that over the response tokens.
  `POOLED_RTOL = 8 u = 3.1e-2` allows a few u of accumulated error and still fails on
  any real fault (wrong rows, a missed upcast that overflows, a dtype mix-up: O(1)).
- The reward is checked against its Lipschitz bound, not a guessed number: with cosine
  similarity s_ij = cos_ij / tau and the InfoNCE loss L_i = -s_ip + log sum_j exp(s_ij),
  |dL_i| <= 2 max_j |ds_ij|, and r_CL = max(-lambda L, clip) gives
  |dr_i| <= 2 lambda max|dcos| / tau. A reward difference above that bound means the
  rewards were not computed from these embeddings. The measured difference is printed
  beside the spread of r_CL, so a reader sees whether bf16 noise matters at this tau.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clipo_megatron.models.arch import GPTArch

U_BF16 = 2.0**-8
POOLED_RTOL = 8 * U_BF16
SMALL = GPTArch(
    vocab_size=256, hidden_size=128, num_layers=2, num_attention_heads=4, num_query_groups=2,
    ffn_hidden_size=256, max_position_embeddings=128, tie_embeddings=False,
)  # fmt: skip
LARGER = GPTArch(
    vocab_size=4096, hidden_size=1024, num_layers=8, num_attention_heads=16, num_query_groups=4,
    ffn_hidden_size=2816, max_position_embeddings=512, tie_embeddings=False,
)  # fmt: skip  # what the GPU run uses: depth and width where rounding accumulates


@dataclass
class Bf16Report:
    pooled_rel_err: float  # max over rows of ||p16 - p32|| / ||p32||
    logprob_max_abs: float  # max |logprob16 - logprob32| over response tokens (for context)
    reward_max_abs: float  # max |r_CL(p16) - r_CL(p32)|
    reward_bound: float  # 2 lambda max|dcos| / tau
    reward_spread: float  # std of r_CL(p32) over anchors: the signal bf16 noise competes with
    rows: int

    def failures(self) -> list[str]:
        out = []
        if not self.pooled_rel_err <= POOLED_RTOL:
            out.append(f"bf16 pooled relative error {self.pooled_rel_err:.3g} > {POOLED_RTOL:.3g}")
        if not self.reward_max_abs <= self.reward_bound + 1e-6:
            out.append(
                f"bf16 reward difference {self.reward_max_abs:.3g} above its Lipschitz bound "
                f"{self.reward_bound:.3g}: the rewards do not follow from the embeddings"
            )
        return out


def _batch(arch: GPTArch, groups: int, per_group: int, seq: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    b = groups * per_group
    ids = torch.randint(0, arch.vocab_size, (b, seq), generator=gen)
    mask = torch.zeros(b, seq, dtype=torch.bool)
    lengths = torch.randint(seq // 2, seq + 1, (b,), generator=gen)
    prompt = seq // 4
    for i in range(b):
        mask[i, prompt : int(lengths[i])] = True
    correct = (torch.rand(b, generator=gen) < 0.5).long()
    gids = torch.arange(groups).repeat_interleave(per_group)
    return ids, mask, lengths, correct, gids, torch.arange(b)


def logprob_and_pool(model, ids, mask, lengths, *, micro_batch: int, device):
    """The workers' logprob pass: microbatches teed through the pooler, the final norm hooked.
    Returns logprobs [B, S-1] and pooled states [B, H], both fp32 on `device`, in row order."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import (
        SAMPLE_IDX_KEY,
        MicrobatchPooler,
        find_final_norm,
    )

    b, s = ids.shape
    mbs = [
        {
            SAMPLE_IDX_KEY: torch.arange(i, min(i + micro_batch, b)).to(device),
            "token_mask": mask[i : i + micro_batch].to(device),
            "input_lengths": lengths[i : i + micro_batch].to(device),
            "input_ids": ids[i : i + micro_batch].to(device),
        }
        for i in range(0, b, micro_batch)
    ]
    causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1).view(1, 1, s, s).to(device)
    pos = torch.arange(s).unsqueeze(0).to(device)
    pooler, lps = MicrobatchPooler(), []
    # Under emulated_cuda grad stays on: there Megatron's output layer sees its input untagged
    # inside its autograd Function under no_grad, a gap of the emulator, not a CUDA rule. The
    # numbers do not depend on it. (A real CUDA tensor is no EmulatedCudaTensor.)
    from clipo_testkit.emulated_cuda import is_on_device

    emulated = is_on_device(torch.empty(0, device=device))
    grad_mode = torch.enable_grad() if emulated else torch.no_grad()
    with grad_mode, pooler.hooked(find_final_norm(model)):
        for mb in pooler.tee(mbs):
            x = mb["input_ids"]
            logits = model(x, pos.expand_as(x), causal)  # [b, S, V]
            lp = torch.log_softmax(logits[:, :-1].float(), -1)
            lps.append(lp.gather(-1, x[:, 1:].unsqueeze(-1)).squeeze(-1).detach())  # [b, S-1]
    rows, pooled = pooler.result()
    order = torch.argsort(rows)
    return torch.cat(lps)[order], pooled[order]


def bf16_vs_fp32(
    device, *, arch: GPTArch = SMALL, groups: int = 8, per_group: int = 8, seq: int = 64,
    micro_batch: int = 8, embed_dim: int = 64, seed: int = 0,
) -> Bf16Report:  # fmt: skip
    """One GPTModel in fp32 and in bf16 from the same weights, pooled and stepped alike."""
    from megatron.core.transformer.module import Float16Module

    from clipo_megatron.core import CLIPOConfig
    from clipo_megatron.megatron.head_trainer import HeadTrainer
    from clipo_megatron.runner.model.model_builder import build_gpt_model, transformer_config

    torch.manual_seed(seed)
    fp32 = build_gpt_model(arch, transformer_config(arch))
    config16 = transformer_config(arch, bf16=True)
    bf16 = build_gpt_model(arch, config16)
    bf16.load_state_dict(fp32.state_dict())
    # As NeMo-RL's Megatron worker holds it: Float16Module casts every parameter to bf16
    # (the same weights, rounded once) and returns fp32 logits; the final norm runs in bf16.
    bf16 = Float16Module(config16, bf16)
    ids, mask, lengths, correct, gids, sids = _batch(arch, groups, per_group, seq, seed)
    out = {}
    for name, model in (("fp32", fp32), ("bf16", bf16)):
        model = model.to(device).eval()
        out[name] = logprob_and_pool(
            model, ids, mask, lengths, micro_batch=micro_batch, device=device
        )
    (lp32, p32), (lp16, p16) = out["fp32"], out["bf16"]
    rel = ((p16 - p32).norm(dim=1) / p32.norm(dim=1)).max()
    tok = mask[:, 1:].to(device)
    lp_diff = ((lp16 - lp32).abs() * tok).max()

    cfg = CLIPOConfig(embed_dim=embed_dim)
    torch.manual_seed(seed + 1)
    w0 = torch.nn.Linear(arch.hidden_size, embed_dim, bias=False).weight.detach()  # host
    results, cos = [], []
    for pooled in (p32, p16):
        head = torch.nn.Linear(arch.hidden_size, embed_dim, bias=False)
        with torch.no_grad():
            head.weight.copy_(w0)  # the same head before each step
        trainer = HeadTrainer(head.to(device), cfg)
        res = trainer.step(pooled, correct, gids, sids, step=0)
        results.append(res.rewards)
        e = torch.nn.functional.normalize(res.embeddings.float(), dim=-1)  # [B, d]
        cos.append(e @ e.T)  # [B, B]; only same-group pairs enter the loss
    same = (gids.unsqueeze(0) == gids.unsqueeze(1)).to(device)
    dcos = ((cos[1] - cos[0]).abs() * same).max()
    r32, r16 = results
    anchors = (correct == 1).to(device)
    return Bf16Report(
        pooled_rel_err=float(rel),
        logprob_max_abs=float(lp_diff),
        reward_max_abs=float((r16 - r32).abs().max()),
        reward_bound=float(2 * cfg.lam * dcos / cfg.temperature),
        reward_spread=float(r32[anchors].std()) if int(anchors.sum()) > 1 else 0.0,
        rows=int(ids.shape[0]),
    )
