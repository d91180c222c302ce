# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The compare table's numbers: 95 % t-intervals against hand-computed ones, the paired
difference, and the verdict each interval allows."""

from __future__ import annotations

import pytest

from clipo_megatron.reporting.compare_stats import (
    fmt_interval,
    paired_difference,
    t975,
    t_interval,
    verdict,
)

# the standard t-table, two-sided 95 % (df -> t_{0.975, df}), to 4 decimals
T_TABLE = {
    1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060,
    9: 2.2622, 10: 2.2281, 15: 2.1314, 20: 2.0860, 25: 2.0595, 30: 2.0423, 40: 2.0211,
    60: 2.0003, 120: 1.9799,
}  # fmt: skip


def test_t_critical_values():
    for df, t in T_TABLE.items():
        assert t975(df) == pytest.approx(t, abs=5e-5), df
    assert 1.9600 < t975(1000) < 1.9624  # towards the normal's 1.95996
    with pytest.raises(ValueError, match="df=0"):
        t975(0)


def test_t_interval_by_hand():
    # [0.7, 0.75, 0.8]: mean 0.75, s = 0.05, se = 0.05 / sqrt(3) = 0.0288675,
    # t_{0.975, 2} = 4.3026527, half = 4.3026527 * 0.0288675 = 0.1242069 -> [0.6257931, 0.8742069]
    iv = t_interval([0.7, 0.75, 0.8])
    assert iv.mean == pytest.approx(0.75, abs=1e-15) and iv.n == 3
    assert iv.low == pytest.approx(0.6257931, abs=1e-7)
    assert iv.high == pytest.approx(0.8742069, abs=1e-7)
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
    # half = 4.3026527 * 0.0288675 / sqrt(3) = 0.0717109 -> [0.0116225, 0.1550442]
    d = paired_difference(clipo, [0.6, 0.7, 0.7])
    assert d.mean == pytest.approx(1 / 12, abs=1e-12)
    assert (d.low, d.high) == (
        pytest.approx(0.0116225, abs=1e-7),
        pytest.approx(0.1550442, abs=1e-7),
    )
    assert verdict(d, "held-out pass@1 after", "GRPO") == (
        "held-out pass@1 after: CLIPO is better by 0.083 (95 % interval [+0.012, +0.155] over 3 seeds)"
    )
    # d = [0, -0.05, 0.1]: mean 0.0166667, s = 0.0763763, half = 4.3026527 * 0.0763763 / sqrt(3)
    # = 0.1897292 -> [-0.1730625, 0.2063958]: covers zero
    z = paired_difference(clipo, [0.7, 0.8, 0.7])
    assert z.covers_zero()
    assert (z.low, z.high) == (
        pytest.approx(-0.1730625, abs=1e-7),
        pytest.approx(0.2063958, abs=1e-7),
    )
    assert verdict(z, "perturbed pass@1 after", "GRPO") == (
        "perturbed pass@1 after: no measurable difference (CLIPO minus GRPO +0.017, "
        "95 % interval [-0.173, +0.206] over 3 seeds)"
    )
    # the baseline ahead on every seed by 0.2, 0.25, 0.3: d mean -0.25, half 0.1242069
    b = paired_difference(clipo, [0.9, 1.0, 1.1])
    assert verdict(b, "train reward", "DAPO").startswith("train reward: DAPO is better by 0.250")
    one = paired_difference([0.7], [0.6])
    assert verdict(one, "held-out pass@1 after", "GRPO") == (
        "held-out pass@1 after: one seed gives no interval; CLIPO minus GRPO is +0.100 on this "
        "one draw, which is not evidence either way"
    )
    with pytest.raises(ValueError, match="one baseline per seed"):
        paired_difference([0.1, 0.2], [0.1])
