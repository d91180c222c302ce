# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Scores as the paper reports them: per dataset pass@1 (%), then the suite's averages, then run deltas.

pass@1 of a dataset = mean over questions of the fraction of its n samples
judged correct (= mean over all samples, n being equal), in percent.
Averages are unweighted means of dataset scores (`suites.group_members`).
"""

from __future__ import annotations

from clipo_megatron.eval.suites import group_members


def _delta(score: float | None, baseline: float | None) -> float | None:
    """score - baseline, None where either is missing."""
    return None if score is None or baseline is None else score - baseline


def dataset_score(verdicts: list[float]) -> float:
    """pass@1 in percent over all samples of a dataset."""
    if not verdicts:
        raise ValueError("no samples to score")
    return 100.0 * sum(verdicts) / len(verdicts)


def averages(scores: dict[str, float]) -> dict[str, float]:
    """{"M-Avg": ..., "G-Avg"/"C-Avg": ..., "Avg": ...} over the datasets present."""
    return {
        g: sum(scores[d] for d in members) / len(members)
        for g, members in group_members(list(scores)).items()
    }


def compare(runs: dict[str, dict[str, float]]) -> dict:
    """Side-by-side scores of runs (name -> {column: score}) and deltas against the first run.

    Columns are the union in first-seen order; a run missing a column gets None (and so does its delta).
    """
    if len(runs) < 2:
        raise ValueError(f"compare needs two or more runs, got {len(runs)}")
    columns: list[str] = []
    for scores in runs.values():
        columns += [c for c in scores if c not in columns]
    names = list(runs)
    base = runs[names[0]]
    table = {name: {c: runs[name].get(c) for c in columns} for name in names}
    deltas = {name: {c: _delta(table[name][c], base.get(c)) for c in columns} for name in names[1:]}
    return {"baseline": names[0], "columns": columns, "scores": table, "deltas": deltas}
