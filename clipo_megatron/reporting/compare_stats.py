# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Means, 95 % t-intervals over seeds, and the verdict they allow, for `clipo-megatron compare`.

A handful of seeds is the regime here, so the interval is Student's t
(mean +- t_{0.975, n-1} * s / sqrt(n)), not a normal one; with one seed there is
no interval, and the verdict says so instead of reading a single draw as a result.
The paired difference (CLIPO minus baseline, seed by seed) removes the variance
that both arms share through the seed (the same prompts, the same base policy).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass


def t975(df: int) -> float:
    """The two-sided 95 % critical value of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"df={df} must be >= 1")
    from scipy.stats import t

    return float(t.ppf(0.975, df))


@dataclass(frozen=True)
class Interval:
    """Mean of `values` and its 95 % t-interval (`low` / `high` None with fewer than 2 values)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    values: tuple[float, ...]

    @property
    def defined(self) -> bool:
        return self.low is not None and self.high is not None

    def covers_zero(self) -> bool:
        return self.defined and self.low <= 0.0 <= self.high  # type: ignore[operator]

    def to_dict(self) -> dict:
        return {**asdict(self), "values": list(self.values)}


def t_interval(values: list[float]) -> Interval:
    if not values:
        raise ValueError("t_interval needs at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, None, None, 1, tuple(values))
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values), tuple(values))


def paired_difference(clipo: list[float], baseline: list[float]) -> Interval:
    """CLIPO minus baseline, seed by seed (the lists are in the same seed order)."""
    if len(clipo) != len(baseline):
        raise ValueError(f"paired difference needs one baseline per seed: {clipo} vs {baseline}")
    return t_interval([c - b for c, b in zip(clipo, baseline)])


def fmt_interval(iv: Interval, digits: int = 3) -> str:
    """e.g. "0.712 [0.650, 0.774]" or "0.712 (1 seed: no interval)"."""
    if not iv.defined:
        return f"{iv.mean:.{digits}f} (1 seed: no interval)"
    return f"{iv.mean:.{digits}f} [{iv.low:.{digits}f}, {iv.high:.{digits}f}]"


def verdict(diff: Interval, what: str, baseline: str = "the baseline", digits: int = 3) -> str:
    """What the paired difference allows one to say, in plain words."""
    d = f"{diff.mean:+.{digits}f}"
    if not diff.defined:
        return (
            f"{what}: one seed gives no interval; CLIPO minus {baseline} is {d} on this one draw, "
            "which is not evidence either way"
        )
    ci = f"95 % interval [{diff.low:+.{digits}f}, {diff.high:+.{digits}f}] over {diff.n} seeds"
    if diff.covers_zero():
        return f"{what}: no measurable difference (CLIPO minus {baseline} {d}, {ci})"
    better = "CLIPO" if diff.mean > 0 else baseline
    return f"{what}: {better} is better by {abs(diff.mean):.{digits}f} ({ci})"
