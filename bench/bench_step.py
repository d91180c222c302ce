# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Step-time breakdown of the single-machine CLIPO run, before / after prompt sharing, in one run.

Runs the embedded default (SmolLM2-135M-Instruct, Megatron policy, vLLM generator when
installed, else HF) for a few RL steps in each phase, every phase from the same starting
checkpoint (policy, head, optimizers, RNG), so all do the same steps on the same prompts:
- before: one row per rollout in the logprob pass and the update (`train.shared_prefix=false`)
  and every rollout prefilling its own prompt (`gen.share_prefill = False`);
- packed: shared-prefix passes, per-rollout prefill: the *same rollouts* as before, so every
  number must agree with before's to float tolerance (the passes' exactness, end to end);
- after: shared-prefix passes and shared prefill (the defaults). vLLM's sampled tokens differ
  from before's where the old prefill needed two engine steps (docs/validation.md, "Step-time breakdown: before and after prompt sharing, in one run").

Per stage: median seconds per step before and after, the FLOPs each pass does (counted from
the model's shapes, `models/flops.py`: executed work, padding included) and the achieved
FLOP/s against the machine's peak (a large fp32 matmul measured here). Then the numbers of
both phases side by side (rewards, losses), which must agree.

    python bench/bench_step.py [--steps 3] [--phases before,after] [key=value overrides]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # clipo_testkit.token_counting


def matmul_peak_flops(n: int = 2048, repeats: int = 5) -> float:
    """Best-of fp32 matmul FLOP/s with this process's torch threads (the box's usable peak)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


class StepProbe:
    """Records what one step's passes and generator processed, for the FLOP count."""

    def __init__(self, run):
        self.run, self.shapes, self.tokens = run, [], []
        real = run.gen.generate

        def generate(*a, **kw):
            ro = real(*a, **kw)
            self.shapes.append(self._pass_shapes(ro))
            return ro

        run.gen.generate = generate

    def _pass_shapes(self, ro):
        from clipo_megatron.runner.micro_batches import micro_batches
        from clipo_megatron.runner.passes import pack

        cfg = self.run.cfg
        ids, mask = pack(ro.prompt_ids, ro.response_ids, self.run.tok.pad_token_id)
        mbs = micro_batches(ids, mask, cfg.train.micro_batch, shared_prefix=cfg.train.shared_prefix)
        prompts = {tuple(p) for p in ro.prompt_ids}
        return {
            "mbs": [tuple(mb["ids"].shape) for mb in mbs],
            "rollouts": len(ro.texts),
            "response_tokens": int(mask.sum()),
            "prompt_tokens": sum(len(p) for p in ro.prompt_ids),
            "unique_prompt_tokens": sum(len(p) for p in prompts),
        }


PHASES = {"before": (False, False), "packed": (True, False), "after": (True, True)}


def run_phase(run, steps: int, phase: str):
    from contextlib import nullcontext

    run.cfg.train.shared_prefix, run.gen.share_prefill = PHASES[phase]
    probe = StepProbe(run)
    counter = nullcontext(None)
    if hasattr(run.gen, "llm"):
        from clipo_testkit.token_counting import VLLMTokenCounter

        counter = VLLMTokenCounter(run.gen.llm)
    hist, counts = [], []
    for _ in range(steps):
        with counter as c:
            hist.append(run.step())
        counts.append(copy.copy(c) if c is not None else None)
        if c is not None:
            c.prefill = c.decode = c.cache_hits = c.steps = 0
    del run.gen.generate  # the probe's wrapper
    return hist, probe.shapes, counts


def flops_of(arch, shapes, count) -> dict:
    from clipo_megatron.models.flops import generation_flops, pass_flops

    prefill = count.prefill if count is not None else shapes["prompt_tokens"]
    return {
        "generate": generation_flops(arch, prefill, shapes["response_tokens"], shapes["rollouts"]),
        "logprob_embed": pass_flops(arch, shapes["mbs"]),
        "train": pass_flops(arch, shapes["mbs"], backward=True),
        "prefill_tokens": prefill,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--phases", default="before,packed,after", help=f"of {', '.join(PHASES)}")
    ap.add_argument("--config", default="examples/configs/cpu_demo.yaml")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    from clipo_megatron.runner.config import load_config
    from clipo_megatron.runner.run import STAGES, Run

    cfg = load_config(a.config, [f"output.dir={tempfile.mkdtemp()}", *a.overrides])
    t0 = time.perf_counter()
    run = Run(cfg)
    setup = time.perf_counter() - t0
    peak = matmul_peak_flops()
    start = copy.deepcopy(run.state_dict())
    phases = a.phases.split(",")
    res = {}
    for i, ph in enumerate(phases):
        if i:
            run.load_state_dict(copy.deepcopy(start))
        t0 = time.perf_counter()
        hist, shapes, counts = run_phase(run, a.steps, ph)
        res[ph] = {
            "hist": hist,
            "wall": time.perf_counter() - t0,
            "flops": [flops_of(run.arch, s, c) for s, c in zip(shapes, counts)],
            "shapes": shapes,
        }
    print(
        f"\nSmolLM2-135M ({cfg.model.source}), {cfg.rollout.prompts_per_step} prompts x "
        f"{cfg.rollout.n} rollouts, max {cfg.rollout.max_tokens} new tokens, torch threads "
        f"{torch.get_num_threads()}, {a.steps} steps per phase (median), set-up {setup:.1f} s, "
        f"generator {type(run.gen).__name__}, fp32 matmul peak {peak / 1e9:.0f} GFLOP/s\n"
    )
    med = {
        ph: {s: statistics.median(h[f"time/{s}"] for h in r["hist"]) for s in STAGES}
        for ph, r in res.items()
    }
    fl = {
        ph: {k: statistics.median(f[k] for f in r["flops"]) for k in r["flops"][0]}
        for ph, r in res.items()
    }
    head = " | ".join(f"{ph} s | {ph} GFLOP | {ph} GFLOP/s (% peak)" for ph in phases)
    many = len(phases) > 1
    print(f"| stage | {head} |" + (f" {phases[-1]} vs {phases[0]} |" if many else ""))
    print("|---" * (1 + 3 * len(phases) + many) + "|")
    for s in STAGES:
        cells = []
        for ph in phases:
            t, f = med[ph][s], fl[ph].get(s)
            cells.append(
                f"{t:.2f} | {f / 1e9:.0f} | {f / t / 1e9:.0f} ({f / t / peak:.0%})"
                if f
                else f"{t:.2f} | - | -"
            )
        up = f" {med[phases[0]][s] / max(med[phases[-1]][s], 1e-9):.1f}x |" if many else ""
        print(f"| {s} | " + " | ".join(cells) + " |" + up)
    tot = {ph: sum(med[ph].values()) for ph in phases}
    cells = " | ".join(f"{tot[ph]:.2f} | | " for ph in phases)
    up = f" {tot[phases[0]] / tot[phases[-1]]:.1f}x |" if many else ""
    print(f"| **total** | {cells}|{up}")
    for ph in phases:
        sh = res[ph]["shapes"][0]
        print(
            f"\n{ph}: step 0 micro-batches (rows x width) {sh['mbs']}; prompt tokens prefilled "
            f"{fl[ph]['prefill_tokens']:.0f} (median) of {sh['prompt_tokens']} "
            f"({sh['unique_prompt_tokens']} distinct); wall {res[ph]['wall']:.1f} s for {a.steps} steps"
        )
    if many:
        print(
            "\n| step | metric | "
            + " | ".join(phases)
            + f" | rel. diff {phases[1]} vs {phases[0]} |"
        )
        print("|---" * (3 + len(phases)) + "|")
        for k in ("reward/mean", "clipo/loss", "reward/shaped_mean", "pg/loss", "pg/grad_norm"):
            for st in range(a.steps):
                vals = [res[ph]["hist"][st].get(k) for ph in phases]
                if None in vals:
                    continue
                d = abs(vals[1] - vals[0]) / max(abs(vals[0]), 1e-12)
                cells = " | ".join(f"{v:.6g}" for v in vals)
                print(f"| {st} | {k} | {cells} | {d:.1e} |")


if __name__ == "__main__":
    sys.exit(main())
