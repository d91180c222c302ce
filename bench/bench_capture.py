# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Benchmark: the logprob forward with CLIPO capture vs without (same model, same batch).

Variants, each in a fresh process (so its peak RSS is its own):
- plain: GPTModel forward + token log-probs (what NeMo-RL's logprob pass does);
- hook: the same forward with the final-norm hook pooling response tokens;
- output_processor: the same via GPTModel.forward(output_processor=...)
  (megatron-core >= 0.18 only).
The capture keeps only [B, D] sums, so its extra peak memory should be far
below one [B, S, D] fp32 tensor (printed for scale).

    python bench/bench_capture.py [--layers 8 --hidden 512 --batch 8 --seq 256]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch


def run_variant(variant: str, a) -> dict:
    import os
    import tempfile

    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
    from megatron.core import parallel_state as ps

    from clipo_megatron.core import masked_sum_and_count
    from clipo_megatron.megatron.capture import forward_with_capture, supports_output_processor
    from clipo_megatron.megatron.cpu_shims import enable_cpu_shims
    from clipo_megatron.megatron.model_builder import GPTArch, build_gpt_model

    enable_cpu_shims()
    ps.initialize_model_parallel(1, 1)
    arch = GPTArch(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        num_layers=a.layers,
        num_attention_heads=a.hidden // 64,
        num_query_groups=max(1, a.hidden // 256),
        ffn_hidden_size=4 * a.hidden,
        max_position_embeddings=a.seq,
    )
    torch.manual_seed(0)
    model = build_gpt_model(arch).eval()
    if variant == "output_processor" and not supports_output_processor(model):
        return {"variant": variant, "skipped": "megatron-core < 0.18"}
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    pos = torch.arange(a.seq).expand_as(ids)
    mask = torch.zeros(a.batch, a.seq, dtype=torch.bool)
    mask[:, a.seq // 4 :] = True  # response = last 3/4 of each row
    attn = torch.triu(torch.ones(a.seq, a.seq, dtype=torch.bool), 1).view(1, 1, a.seq, a.seq)

    def pool(h):
        return masked_sum_and_count(h, mask, layout="sbd")[0]

    def logprob_pass(v=variant):
        with torch.no_grad():
            if v == "plain":
                logits = model(ids, pos, attn)
            else:
                logits, _ = forward_with_capture(model, pool, ids, pos, attn, mode=v)
            lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1))
        return lp

    logprob_pass("plain" if variant == "interleaved" else variant)  # warm-up
    if variant == "interleaved":  # timing: alternate plain / hook / output_processor in one process
        modes = ["plain", "hook"] + (
            ["output_processor"] if supports_output_processor(model) else []
        )
        t = {m: [] for m in modes}
        for i in range(a.repeats):
            for m in modes[i % len(modes) :] + modes[: i % len(modes)]:  # rotate: no order bias
                t0 = time.perf_counter()
                logprob_pass(m)
                t[m].append(time.perf_counter() - t0)
        return {"variant": variant, "medians": {m: statistics.median(v) for m, v in t.items()}}
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        logprob_pass()
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    os.environ.pop("UNUSED", None)
    return {
        "variant": variant,
        "median_s": statistics.median(times),
        "peak_growth_mb": (peak - base) / 1024,
        "peak_rss_mb": peak / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--_one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._one:
        print(json.dumps(run_variant(a._one, a)))
        return
    rows = []
    for variant in (
        "interleaved",
        "plain",
        "hook",
        "output_processor",
        "plain",
    ):  # plain twice: noise
        cmd = [sys.executable, __file__, "--_one", variant] + [
            f"--{k}={v}" for k, v in vars(a).items() if k != "_one"
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    inter = rows.pop(0)["medians"]
    base = inter["plain"]
    for r in rows:
        r["median_s"] = inter.get(r["variant"], float("nan"))
    base_peak = min(r["peak_rss_mb"] for r in rows if r["variant"] == "plain")
    bsd_mb = a.batch * a.seq * a.hidden * 4 / 2**20
    import megatron.core as mc

    print(
        f"\nmegatron-core {mc.__version__}, torch {torch.__version__}, {a.threads} threads; model: "
        f"{a.layers} layers, hidden {a.hidden}, vocab {a.vocab}; batch {a.batch} x {a.seq} tokens; "
        f"time: median of {a.repeats} interleaved runs in one process; memory: fresh process per variant; one [B, S, D] fp32 tensor = {bsd_mb:.1f} MB\n"
    )
    print(
        "| variant | median logprob forward (s) | ratio vs plain | peak RSS (MB) | vs plain peak (MB) |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['variant']} | skipped ({r['skipped']}) | | | |")
            continue
        print(
            f"| {r['variant']} | {r['median_s']:.4f} | {r['median_s'] / base:.3f}x | {r['peak_rss_mb']:.0f} | "
            f"{r['peak_rss_mb'] - base_peak:+.1f} |"
        )


if __name__ == "__main__":
    main()
