# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron compare`'s outputs: compare.json, compare.md and the plots, from the runs'
own results.json / metrics.jsonl (nothing is recomputed from memory, so a resumed compare
reports exactly what a fresh one would).

Per objective: every metric for CLIPO and the baseline side by side (mean over seeds and its
95 % t-interval) and the paired difference; a plain-words verdict for the metrics that decide
(held-out pass@1 after, perturbed pass@1 after, the final train reward); per seed the divergence
step, the first step at which the arms' sampled tokens differ (`rollout/token_hash`).
"""

from __future__ import annotations

import json
from pathlib import Path

from clipo_megatron.reporting.compare_stats import (
    Interval,
    fmt_interval,
    paired_difference,
    t_interval,
    verdict,
)
from clipo_megatron.reporting.compare_steps import (
    DIAGNOSTICS,
    divergence_step,
    run_diagnostics,
    shared_degenerate_steps,
)

ARMS = ("clipo", "baseline")
# metric key -> (label, digits); the order of the tables.
METRICS = {
    "train_reward_first": ("train reward, first quarter of steps", 3),
    "train_reward_last": ("train reward, last quarter of steps (final)", 3),
    "pass@1_before": ("held-out pass@1 before", 3),
    "pass@1_after": ("held-out pass@1 after", 3),
    "pass@1_perturbed_before": ("perturbed pass@1 before", 3),
    "pass@1_perturbed_after": ("perturbed pass@1 after", 3),
    "step_seconds": ("mean step time (s)", 1),
}
VERDICT_METRICS = ("pass@1_after", "pass@1_perturbed_after", "train_reward_last")
# Reported per arm, never differenced: the arms train one after another, so a step-time gap is
# mostly the box's load moving between them (measure it back to back on a quiet box: bench/).
UNPAIRED = ("step_seconds",)
STEP_TIME_NOTE = (
    "Step time is each arm's own and is not compared: the arms run one after another and the "
    "box's load moves between them; compare it only from runs back to back on a quiet box "
    "(`bench/bench_step.py`)."
)


def run_dir(out: Path, objective: str, arm: str, seed: int) -> Path:
    return Path(out) / objective / arm / f"seed{seed}"


def run_metrics(results: dict) -> dict[str, float]:
    """One run's numbers (a metric it did not measure, e.g. eval.size=0, is absent)."""
    m = {
        "train_reward_first": results["train_reward_first_quarter"],
        "train_reward_last": results["train_reward_last_quarter"],
        "step_seconds": sum(results["mean_step_seconds"].values()),
    }
    for when in ("before", "after"):
        ev = results.get(f"eval_{when}") or {}
        for key in ("pass@1", "pass@1_perturbed"):
            if key in ev:
                m[f"{key}_{when}"] = ev[key]
    return m


def _read_runs(out: Path, objective: str, arm: str, seeds: list[int]):
    """(metrics per seed, history per seed) of one cell."""
    from clipo_megatron.reporting.metrics_log import read_metrics

    metrics, histories = [], []
    for s in seeds:
        d = run_dir(out, objective, arm, s)
        metrics.append(run_metrics(json.loads((d / "results.json").read_text())))
        histories.append(read_metrics(d / "metrics.jsonl"))  # null (non-finite) back to NaN
    return metrics, histories


def fmt_divergence(d: dict) -> str:
    if d["steps"] == 0:
        return "not recorded (runs without rollout/token_hash)"
    return f"step {d['step']}" if d["step"] is not None else f"never within {d['steps']} steps"


def summarize(out: Path, objectives: list[str], seeds: list[int]) -> dict:
    """compare.json's content: per objective, per arm and metric an interval over seeds, and
    per metric the paired difference with its verdict."""
    report: dict = {"objectives": objectives, "seeds": seeds, "by_objective": {}}
    first = json.loads(
        (run_dir(out, objectives[0], "clipo", seeds[0]) / "results.json").read_text()
    )
    ev = first.get("eval_after") or {}
    report["eval"] = {k: ev[k] for k in ("problems", "perturbed_problems", "n") if k in ev}
    for obj in objectives:
        runs = {arm: _read_runs(out, obj, arm, seeds) for arm in ARMS}
        per_arm = {arm: runs[arm][0] for arm in ARMS}
        hists = [runs[arm][1] for arm in ARMS]
        diverged = {str(s): divergence_step(c, b) for s, c, b in zip(seeds, *hists)}
        degenerate = {str(s): shared_degenerate_steps(c, b) for s, c, b in zip(seeds, *hists)}
        per_seed = [run_diagnostics(h) for h in hists[0]]
        diagnostics = {
            key: t_interval([d[key] for d in per_seed]).to_dict()
            for key in DIAGNOSTICS
            if all(key in d for d in per_seed)
        }
        cells: dict[str, dict] = {arm: {} for arm in ARMS}
        diffs, verdicts = {}, []
        for key, (label, digits) in METRICS.items():
            if not all(key in m for arm in ARMS for m in per_arm[arm]):
                continue  # not measured in every run (e.g. eval.size=0)
            vals = {arm: [m[key] for m in per_arm[arm]] for arm in ARMS}
            for arm in ARMS:
                cells[arm][key] = t_interval(vals[arm]).to_dict()
            if key in UNPAIRED:
                continue
            diff = paired_difference(vals["clipo"], vals["baseline"])
            diffs[key] = diff.to_dict()
            if key in VERDICT_METRICS:
                verdicts.append(verdict(diff, label, baseline_label(obj), digits))
        report["by_objective"][obj] = {
            "cells": cells,
            "differences": diffs,
            "verdicts": verdicts,
            "divergence_step": diverged,
            "degenerate_steps": degenerate,
            "clipo_diagnostics": diagnostics,
        }
    return report


def baseline_label(objective: str) -> str:
    return objective.upper()


def clipo_label(objective: str) -> str:
    return f"{objective.upper()} + CLIPO"


def _cell(d: dict, digits: int, one_seed: bool) -> str:
    iv = Interval(d["mean"], d["low"], d["high"], d["n"], tuple(d["values"]))
    return f"{iv.mean:.{digits}f}" if one_seed else fmt_interval(iv, digits)


def _signed(d: dict, digits: int, one_seed: bool) -> str:
    if one_seed or d["low"] is None:
        return f"{d['mean']:+.{digits}f}"
    return f"{d['mean']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


def markdown(report: dict, title: str) -> str:
    seeds = report["seeds"]
    one_seed = len(seeds) == 1
    lines = [f"# {title}", ""]
    if one_seed:
        lines += [
            f"One seed ({seeds[0]}): each number is a single run, with no interval; a difference "
            "between single runs is not evidence either way (run more `--seeds` for intervals).",
            "",
        ]
    else:
        lines += [
            f"Seeds {', '.join(map(str, seeds))}: each cell is the mean over seeds and its 95 % "
            "t-interval [low, high]; differences are CLIPO minus the baseline, paired by seed.",
            "",
        ]
    ev = report.get("eval", {})
    if ev:
        sets = []
        if "problems" in ev:
            sets.append(f"held-out, {ev['problems']} problems x {ev['n']} samples")
        if "perturbed_problems" in ev:
            sets.append(
                f"perturbed held-out (a third term, numbers 11-99, a distracting sentence), "
                f"{ev['perturbed_problems']} x {ev['n']}"
            )
        lines += ["Evaluation: " + "; ".join(sets) + ".", ""]
    for obj, r in report["by_objective"].items():
        lines += [
            f"## {clipo_label(obj)} beside {baseline_label(obj)}",
            "",
            f"| metric | {clipo_label(obj)} | {baseline_label(obj)} | difference |",
            "|---|---|---|---|",
        ]
        for key in [k for k in METRICS if k in r["cells"]["clipo"]]:
            label, digits = METRICS[key]
            clipo, base = r["cells"]["clipo"][key], r["cells"]["baseline"][key]
            d = r["differences"].get(key)
            diff = _signed(d, digits, one_seed) if d else "not compared"
            lines.append(
                f"| {label} | {_cell(clipo, digits, one_seed)} | {_cell(base, digits, one_seed)} "
                f"| {diff} |"
            )
        if any(k in r["cells"]["clipo"] for k in UNPAIRED):
            lines += ["", STEP_TIME_NOTE]
        div = r.get("divergence_step", {})
        if div:  # a property of the pair: a line under the table
            lines += [
                "",
                "Divergence step (the first step whose sampled tokens differ between the arms, "
                "from `rollout/token_hash`; 0-based, as metrics.jsonl): "
                + "; ".join(f"seed {s}: {fmt_divergence(d)}" for s, d in div.items())
                + ".",
            ]
        lines += _degenerate_lines(r.get("degenerate_steps", {}))
        lines += _diagnostics_table(r.get("clipo_diagnostics", {}), obj, seeds)
        lines += ["", *[f"- {v}" for v in r["verdicts"]], ""]
    return "\n".join(lines)


def _degenerate_lines(degenerate: dict[str, list[int]]) -> list[str]:
    """A line naming the steps where both arms' rollouts were all wrong (or all right)."""
    found = {s: steps for s, steps in degenerate.items() if steps}
    if not found:
        return []
    per_seed = "; ".join(
        f"seed {s}: step{'s' * (len(st) > 1)} {', '.join(map(str, st))}" for s, st in found.items()
    )
    return [
        "",
        "Degenerate steps (every rollout of both arms wrong, or every one right: no group had "
        f"a learning signal; the task's draw, not an arm): {per_seed}.",
    ]


def _diagnostics_table(diag: dict, objective: str, seeds: list[int]) -> list[str]:
    """Markdown lines: the CLIPO arm's diagnostics per seed and their mean [95 % interval]."""
    if not diag:
        return []
    many = len(seeds) > 1
    head = "| diagnostic | " + " | ".join(f"seed {s}" for s in seeds)
    lines = [
        "",
        f"What CLIPO did to the update ({clipo_label(objective)} arm, mean over its steps; "
        'docs/method.md, "Does CLIPO change the update?"):',
        "",
        head + (" | mean [95 % interval] |" if many else " |"),
        "|---" * (len(seeds) + 1 + many) + "|",
    ]
    for key, d in diag.items():
        label, digits = DIAGNOSTICS[key]
        row = f"| {label} | " + " | ".join(f"{v:.{digits}f}" for v in d["values"])
        lines.append(row + (f" | {_cell(d, digits, False)} |" if many else " |"))
    return lines


def write_report(
    out: Path, objectives: list[str], seeds: list[int], title: str, plots: bool = True
) -> dict:
    """compare.json, compare.md and (with `plots`) curves_clipo_vs_<objective>.png per objective
    and paired_differences.png; returns the report."""
    out = Path(out)
    report = summarize(out, objectives, seeds)
    (out / "compare.json").write_text(json.dumps(report, indent=2))
    (out / "compare.md").write_text(markdown(report, title))
    if plots:
        from clipo_megatron.reporting.plots import plot_arms_overlaid, plot_paired_differences

        for obj in objectives:
            arms = {
                clipo_label(obj): _read_runs(out, obj, "clipo", seeds)[1],
                baseline_label(obj): _read_runs(out, obj, "baseline", seeds)[1],
            }
            plot_arms_overlaid(arms, out / f"curves_clipo_vs_{obj}.png", title=title)
        diffs = {o: report["by_objective"][o]["differences"] for o in objectives}
        labels = {k: METRICS[k][0] for k in VERDICT_METRICS if k in diffs[objectives[0]]}
        plot_paired_differences(diffs, labels, out / "paired_differences.png")
    return report
