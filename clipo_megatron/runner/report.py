# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A run's written outputs: the per-step `metrics.jsonl` and the final results.json / results.md."""

from __future__ import annotations

import json
from pathlib import Path

from clipo_megatron.runner.config import RunConfig
from clipo_megatron.runner.run import STAGES


def run_label(cfg: RunConfig) -> str:
    """e.g. "grpo + CLIPO" or "dapo" (CLIPO off)."""
    return f"{cfg.clipo.objective} + CLIPO" if cfg.clipo.enabled else cfg.clipo.objective


def trim_metrics_log(path: Path, from_step: int) -> None:
    """Drop the lines of steps >= `from_step` (re-run after a resume), so no step is logged twice."""
    if not path.exists():
        return
    lines = [x for x in path.read_text().splitlines() if x.strip()]
    kept = [x for x in lines if json.loads(x)["step"] < from_step]
    if len(kept) != len(lines):
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(x + "\n" for x in kept))
        tmp.replace(path)


def eval_rows(cfg: RunConfig, before: dict, after: dict) -> list[str]:
    """results.md rows of both held-out sets, before and after training (what was measured)."""
    t, rows = cfg.eval.temperature, []
    for key, name in (("pass@1", "held-out"), ("pass@1_perturbed", "perturbed held-out")):
        for when, res in (("before", before), ("after", after)):
            if key in res:
                size = res["problems" if key == "pass@1" else "perturbed_problems"]
                rows.append(
                    f"| {name} pass@1 {when} ({size} x n={res['n']}, T={t}) | {res[key]:.3f} |"
                )
    if "samples_per_s" in after:
        rows.append(f"| eval throughput (samples/s) | {after['samples_per_s']:.1f} |")
    return rows


def write_results(
    out: Path, cfg: RunConfig, history: list[dict], before: dict, after: dict
) -> None:
    h = history
    k = max(1, len(h) // 4)
    first = sum(x["reward/mean"] for x in h[:k]) / k
    last = sum(x["reward/mean"] for x in h[-k:]) / k
    steps_t = {s: sum(x[f"time/{s}"] for x in h) / len(h) for s in STAGES}
    res = {
        "objective": cfg.clipo.objective,
        "clipo": cfg.clipo.enabled,
        "steps": len(h),
        "train_reward_first_quarter": first,
        "train_reward_last_quarter": last,
        "eval_before": before,
        "eval_after": after,
        "mean_step_seconds": steps_t,
    }
    lines = [
        f"# {run_label(cfg)} on {cfg.data.dataset} ({cfg.model.source}), {len(h)} steps",
        "",
        "| metric | value |",
        "|---|---|",
        f"| train reward, first quarter of steps | {first:.3f} |",
        f"| train reward, last quarter of steps | {last:.3f} |",
    ]
    lines += eval_rows(cfg, before, after)
    lines.append(
        "| mean step time (s): "
        + " / ".join(STAGES)
        + " | "
        + " / ".join(f"{steps_t[s]:.1f}" for s in STAGES)
        + " |"
    )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    # Last, and atomically: a results.json marks a finished run (`clipo-megatron compare` skips it).
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(res, indent=2))
    tmp.replace(out / "results.json")
