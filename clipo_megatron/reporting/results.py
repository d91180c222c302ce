# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A finished run's results.json and results.md, from its history and its evaluations."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clipo_megatron.reporting.metrics_log import dumps


@dataclass(frozen=True)
class RunHeader:
    """What a report says about the run besides its numbers (the trainer fills it in, so this
    package needs no trainer config)."""

    objective: str
    clipo: bool
    dataset: str
    model: str
    eval_temperature: float
    stages: tuple[str, ...]  # the step's timed stages, in order: the `time/<stage>` metrics

    @property
    def label(self) -> str:
        """e.g. "grpo + CLIPO" or "dapo" (CLIPO off)."""
        return f"{self.objective} + CLIPO" if self.clipo else self.objective


def eval_rows(head: RunHeader, before: dict, after: dict) -> list[str]:
    """results.md rows of both held-out sets, before and after training (what was measured)."""
    t, rows = head.eval_temperature, []
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
    out: Path, head: RunHeader, history: list[dict], before: dict, after: dict
) -> None:
    h = history
    k = max(1, len(h) // 4)
    first = sum(x["reward/mean"] for x in h[:k]) / k
    last = sum(x["reward/mean"] for x in h[-k:]) / k
    stages = head.stages
    steps_t = {s: sum(x[f"time/{s}"] for x in h) / len(h) for s in stages}
    res = {
        "objective": head.objective,
        "clipo": head.clipo,
        "steps": len(h),
        "train_reward_first_quarter": first,
        "train_reward_last_quarter": last,
        "eval_before": before,
        "eval_after": after,
        "mean_step_seconds": steps_t,
    }
    lines = [
        f"# {head.label} on {head.dataset} ({head.model}), {len(h)} steps",
        "",
        "| metric | value |",
        "|---|---|",
        f"| train reward, first quarter of steps | {first:.3f} |",
        f"| train reward, last quarter of steps | {last:.3f} |",
    ]
    lines += eval_rows(head, before, after)
    lines.append(
        "| mean step time (s): "
        + " / ".join(stages)
        + " | "
        + " / ".join(f"{steps_t[s]:.1f}" for s in stages)
        + " |"
    )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    # Last, and atomically: a results.json marks a finished run (`clipo-megatron compare` skips it).
    tmp = out / "results.json.tmp"
    tmp.write_text(dumps(res, indent=2))
    tmp.replace(out / "results.json")
