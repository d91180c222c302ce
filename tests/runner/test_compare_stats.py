# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The compare table's numbers: 95 % t-intervals against hand-computed ones, the paired
difference, and the verdict each interval allows."""

from __future__ import annotations

import pytest

from clipo_megatron.runner.compare_stats import (
    fmt_interval,
    paired_difference,
    t975,
    t_interval,
    verdict,
)


def test_t_critical_values():
    # standard t-table, two-sided 95 %; between rows the smaller df's value (wider interval)
    assert [t975(d) for d in (1, 2, 4, 30)] == [12.7062, 4.3027, 2.7764, 2.0423]
    assert [t975(d) for d in (35, 40, 59, 60, 120, 1000)] == [
        2.0423,
        2.0211,
        2.0211,
        2.0003,
        1.9799,
        1.9799,
    ]
    with pytest.raises(ValueError, match="df=0"):
        t975(0)


def test_t_interval_by_hand():
    # [0.7, 0.75, 0.8]: mean 0.75, s = 0.05, se = 0.05 / sqrt(3) = 0.0288675,
    # half = 4.3027 * 0.0288675 = 0.1242083 -> [0.6257917, 0.8742083]
    iv = t_interval([0.7, 0.75, 0.8])
    assert iv.mean == pytest.approx(0.75, abs=1e-15) and iv.n == 3
    assert iv.low == pytest.approx(0.6257917, abs=1e-7)
    assert iv.high == pytest.approx(0.8742083, abs=1e-7)
    assert fmt_interval(iv) == "0.750 [0.626, 0.874]"
    # one value: a mean, no interval
    one = t_interval([0.4])
    assert one.mean == 0.4 and one.low is None and not one.defined and not one.covers_zero()
    assert fmt_interval(one) == "0.400 (1 seed: no interval)"
    # equal values: a zero-width interval at the mean
    flat = t_interval([0.5, 0.5])
    assert (flat.low, flat.high) == (0.5, 0.5)


def test_paired_difference_and_verdicts_by_hand():
    clipo = [0.7, 0.75, 0.8]
    # d = [0.1, 0.05, 0.1]: mean 0.0833333, s = sqrt(((1/60)^2 * 2 + (1/30)^2) / 2) = 0.0288675,
    # half = 4.3027 * 0.0288675 / sqrt(3) = 0.0717117 -> [0.0116217, 0.1550450]
    d = paired_difference(clipo, [0.6, 0.7, 0.7])
    assert d.mean == pytest.approx(1 / 12, abs=1e-12)
    assert (d.low, d.high) == (
        pytest.approx(0.0116217, abs=1e-7),
        pytest.approx(0.155045, abs=1e-6),
    )
    assert verdict(d, "held-out pass@1 after", "GRPO") == (
        "held-out pass@1 after: CLIPO is better by 0.083 (95 % interval [+0.012, +0.155] over 3 seeds)"
    )
    # d = [0, -0.05, 0.1]: mean 0.0166667, s = 0.0763763, half = 4.3027 * 0.0763763 / sqrt(3)
    # = 0.1897313 -> [-0.1730646, 0.2063980]: covers zero
    z = paired_difference(clipo, [0.7, 0.8, 0.7])
    assert z.covers_zero()
    assert (z.low, z.high) == (
        pytest.approx(-0.1730646, abs=1e-6),
        pytest.approx(0.206398, abs=1e-6),
    )
    assert verdict(z, "perturbed pass@1 after", "GRPO") == (
        "perturbed pass@1 after: no measurable difference (CLIPO minus GRPO +0.017, "
        "95 % interval [-0.173, +0.206] over 3 seeds)"
    )
    # the baseline ahead on every seed by 0.2, 0.25, 0.3: d mean -0.25, half 0.1242081
    b = paired_difference(clipo, [0.9, 1.0, 1.1])
    assert verdict(b, "train reward", "DAPO").startswith("train reward: DAPO is better by 0.250")
    one = paired_difference([0.7], [0.6])
    assert verdict(one, "held-out pass@1 after", "GRPO") == (
        "held-out pass@1 after: one seed gives no interval; CLIPO minus GRPO is +0.100 on this "
        "one draw, which is not evidence either way"
    )
    with pytest.raises(ValueError, match="one baseline per seed"):
        paired_difference([0.1, 0.2], [0.1])
