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

# t_{0.975, df} for df = 1..30, then 40, 60, 120 (standard tables; 120 also serves beyond).
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
_T975_LARGE = ((40, 2.0211), (60, 2.0003), (120, 1.9799))


def t975(df: int) -> float:
    """The two-sided 95 % critical value of Student's t; between table rows the smaller df's
    (larger, so the interval errs wide)."""
    if df < 1:
        raise ValueError(f"df={df} must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    t = _T975[-1]
    for d, td in _T975_LARGE:
        t = td if df >= d else t
    return t


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
