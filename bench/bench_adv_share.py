# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""How the InfoNCE denominator and tau move CLIPO's share of the advantage, on a run's own rows.

Trains one CLIPO run of the given config (the main job's CLIPO arm by default) and records what
each step's head sees: the pooled response hidden states, correctness and group ids. Then replays
the head on exactly those rows under every (denominator, tau): a fresh head with the run's initial
weights, one AdamW step per RL step as in training, r' = r + r_CL, and `update_diagnostics`
(A(r') against A(r), the run's objective's estimator). Same rollouts for every cell, so the table
isolates the setting; the run's own trajectory is the recorded setting's (the first row marked *).

    python bench/bench_adv_share.py --config examples/configs/cpu_demo.yaml \
        --taus 0.05,0.02,0.01 --denominators all_others,positive_and_negatives [key=value ...]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import tempfile

import torch


def record_run(config: str, overrides: list[str]) -> tuple[list[dict], torch.nn.Module, object]:
    """Train one run; (per step: pooled [b, D], correct [b], group ids [b], sample ids [b]),
    the head as built (before its first step), and the run's CLIPOConfig."""
    from clipo_megatron.megatron.head_trainer import HeadTrainer
    from clipo_megatron.runner.config import load_config
    from clipo_megatron.runner.train import train_one

    steps: list[dict] = []
    first: dict = {}
    original = HeadTrainer.step

    def recording_step(self, pooled, correct, group_ids, sample_ids, *, step):
        if not first:
            first["head"], first["cfg"] = copy.deepcopy(self.head), self.cfg
        steps.append(
            {
                "pooled": pooled.detach().float().clone(),
                "correct": torch.as_tensor(correct).clone(),
                "group_ids": torch.as_tensor(group_ids).clone(),
                "sample_ids": torch.as_tensor(sample_ids).clone(),
                "step": step,
            }
        )
        return original(self, pooled, correct, group_ids, sample_ids, step=step)

    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(
            config,
            [
                "eval.size=0",
                "eval.perturbed_size=0",
                "output.plots=false",
                "output.tensorboard=false",
                "output.checkpoint_every=1000000",
                *overrides,
                f"output.dir={out}",
            ],
        )
        if not cfg.clipo.head_runs:
            raise SystemExit("bench_adv_share: the run must have CLIPO on (clipo.enabled=true)")
        HeadTrainer.step = recording_step  # type: ignore[method-assign]
        try:
            rc = train_one(cfg)
        finally:
            HeadTrainer.step = original  # type: ignore[method-assign]
        if rc != 0:
            raise SystemExit(f"bench_adv_share: the recorded run failed (exit {rc})")
    return steps, first["head"], first["cfg"]


def replay(steps: list[dict], head0: torch.nn.Module, method) -> dict[str, float]:
    """Means over steps of the three diagnostics and the valid-group fraction, for one setting."""
    from clipo_megatron.core.advantages import group_advantages
    from clipo_megatron.core.rewards import shaped_rewards
    from clipo_megatron.megatron.head_trainer import HeadTrainer
    from clipo_megatron.runner.step_metrics import clipo_diagnostics

    torch.manual_seed(0)
    trainer = HeadTrainer(copy.deepcopy(head0), method)
    rows: list[dict[str, float]] = []
    for s in steps:
        out = trainer.step(
            s["pooled"], s["correct"], s["group_ids"], s["sample_ids"], step=s["step"]
        )
        r = s["correct"].float()  # [b] the verifiable 0 / 1 rewards
        adv = group_advantages(shaped_rewards(r, out.rewards.float()), s["group_ids"])  # [b]
        d = clipo_diagnostics(r, out.rewards, adv, s["correct"], s["group_ids"])  # as the run logs
        d["valid"] = out.metrics.get("clipo/valid_group_frac", 0.0)
        rows.append(d)
    return {k: statistics.mean(r[k] for r in rows) for k in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/configs/cpu_demo.yaml")
    ap.add_argument("--taus", default="0.05,0.02,0.01")
    ap.add_argument("--denominators", default="all_others,positive_and_negatives")
    ap.add_argument("--save", help="also write the recorded rows here (torch.save)")
    ap.add_argument("--load", help="replay rows written by --save instead of training")
    ap.add_argument("--first", type=int, help="replay only the first N recorded steps")
    ap.add_argument("overrides", nargs="*", help="OmegaConf dotted overrides of the recorded run")
    args = ap.parse_args()
    if args.load:
        steps, head0, method = torch.load(args.load, weights_only=False)
    else:
        steps, head0, method = record_run(args.config, args.overrides)
        if args.save:
            torch.save((steps, head0, method), args.save)
    steps = steps[: args.first] if args.first else steps
    print(f"\n{len(steps)} recorded steps, {sum(len(s['correct']) for s in steps)} rollouts")
    print("| denominator | tau | valid groups | r_CL spread | adv share | ranked |")
    print("|---|---:|---:|---:|---:|---:|")
    for den in args.denominators.split(","):
        for tau in (float(t) for t in args.taus.split(",")):
            cfg = dataclasses.replace(method, denominator=den, temperature=tau)
            m = replay(steps, head0, cfg)
            mark = " *" if (den, tau) == (method.denominator, method.temperature) else ""
            print(
                f"| {den}{mark} | {tau:g} | {m['valid']:.2f} | {m['clipo/r_cl_spread']:.4f} "
                f"| {100 * m['clipo/adv_share']:.1f} % | {m['clipo/ranked_frac']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
