# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Step-time breakdown and generation throughput of the single-machine CLIPO run.

Runs a few RL steps of the embedded default (SmolLM2-135M-Instruct, Megatron
policy, vLLM generator when installed, else HF; `rollout.backend=hf|vllm`
picks) and prints, per stage, the median time per step:
generate / verify / logprob+embed / head / train / sync, plus generated
tokens per second and rollouts per second.

    python bench/bench_step.py [--steps 3] [key=value overrides]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--config", default="examples/configs/cpu_demo.yaml")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    from clipo_megatron.runner.config import load_config
    from clipo_megatron.runner.run import STAGES, Run

    cfg = load_config(a.config, [f"output.dir={tempfile.mkdtemp()}", *a.overrides])
    t0 = time.perf_counter()
    run = Run(cfg)
    setup = time.perf_counter() - t0
    hist = [run.step() for _ in range(a.steps)]
    import torch

    rollouts = cfg.rollout.prompts_per_step * cfg.rollout.n
    print(
        f"\nSmolLM2-135M ({cfg.model.source}), {cfg.rollout.prompts_per_step} prompts x {cfg.rollout.n} rollouts, "
        f"max {cfg.rollout.max_tokens} new tokens, torch threads {torch.get_num_threads()}, "
        f"{a.steps} steps (median), set-up {setup:.1f} s, generator {type(run.gen).__name__}\n"
    )
    print("| stage | median s / step | share |")
    print("|---|---|---|")
    med = {s: statistics.median(h[f"time/{s}"] for h in hist) for s in STAGES}
    total = sum(med.values())
    for s in STAGES:
        print(f"| {s} | {med[s]:.2f} | {med[s] / total:.0%} |")
    print(f"| **total** | {total:.2f} | 100% |")
    tok = statistics.median(h["response/mean_tokens"] for h in hist) * rollouts
    print(
        f"\ngeneration: {tok / med['generate']:.0f} new tokens/s, {rollouts / med['generate']:.1f} rollouts/s"
    )


if __name__ == "__main__":
    sys.exit(main())
