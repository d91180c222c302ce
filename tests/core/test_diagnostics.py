# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`update_diagnostics` against values computed by hand: equal r_CL among a group's correct
rollouts changes nothing (spread 0, share 0, ranked 0), unequal r_CL ranks them."""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core.advantages import group_advantages
from clipo_megatron.core.diagnostics import TIE_ULPS, update_diagnostics

CORRECT = torch.tensor([1, 1, 1, 0])


def _diag(r, r_cl, correct, groups):
    r, r_cl = torch.tensor(r, dtype=torch.float64), torch.tensor(r_cl, dtype=torch.float64)
    a0 = group_advantages(r, groups)  # A(r)
    a1 = group_advantages(r + r_cl, groups)  # A(r') = A(r + r_CL)
    return update_diagnostics(a0, a1, r_cl, correct, groups)


def test_equal_r_cl_changes_nothing():
    # r' = [0.7, 0.7, 0.7, 0]: two-valued, group normalisation gives GRPO's [.5, .5, .5, -1.5]
    d = _diag([1, 1, 1, 0], [-0.3, -0.3, -0.3, 0], CORRECT, torch.zeros(4, dtype=torch.long))
    assert d["clipo/r_cl_spread"] == 0.0
    assert d["clipo/adv_share"] == pytest.approx(0.0, abs=1e-6)  # only eps=1e-6 of the std differs
    assert d["clipo/ranked_frac"] == 0.0


def test_spread_share_ranked_by_hand():
    # Group 0: r = [1, 1, 1, 0], r_CL = [-.2, -.3, -.4, 0] (valid: 3 correct, 1 incorrect).
    #   spread: std of [-.2, -.3, -.4] (unbiased) = sqrt((.01 + 0 + .01) / 2) = 0.1
    #   A(r): mean .75, unbiased std .5 -> [.5, .5, .5, -1.5] (over std + 1e-6)
    #   r' = [.8, .7, .6, 0]: mean .525, deviations [.275, .175, .075, -.525],
    #   squares .3875, unbiased std sqrt(.3875 / 3) = 0.359398 -> A(r') = dev / (std + 1e-6)
    #   = [.765166, .486924, .208682, -1.460772]; |A(r') - A(r)| sums to .608783
    # Group 1: r = [1, 1, 1, 1] (not valid: no incorrect), r_CL = 0: A = A' = 0
    # Group 2: r = [1, 0, 0, 0] (not valid: one correct), r_CL = [0, 0, 0, 0]:
    #   mean .25, unbiased std .5: A(r) = [1.5, -.5, -.5, -.5] = A(r') (|A| sums to 3)
    # share = (.608783 / 12) / ((3 + 0 + 3) / 12) = .608783 / 6 = 0.101464; ranked 1 of 1 valid
    # (every A above is over std + 1e-6, as group_advantages divides; the asserts keep the 1e-6)
    r = [1, 1, 1, 0] + [1] * 4 + [1, 0, 0, 0]
    r_cl = [-0.2, -0.3, -0.4, 0] + [0.0] * 4 + [0.0] * 4
    groups = torch.arange(3).repeat_interleave(4)
    d = _diag(r, r_cl, torch.tensor(r), groups)
    s0, s1 = 0.5 + 1e-6, math.sqrt(0.3875 / 3) + 1e-6
    dev = [0.275, 0.175, 0.075, -0.525]
    num = sum(abs(x / s1 - y / s0) for x, y in zip(dev, [0.25, 0.25, 0.25, -0.75]))
    assert num == pytest.approx(0.608783, abs=1e-6)  # the hand value above
    assert d["clipo/r_cl_spread"] == pytest.approx(0.1, abs=1e-12)
    assert d["clipo/adv_share"] == pytest.approx(
        num / (2 * 1.5 / s0), abs=1e-12
    )  # sum |A(r)| = 3 + 3
    assert d["clipo/adv_share"] == pytest.approx(0.101464, abs=1e-6)
    assert d["clipo/ranked_frac"] == 1.0


def test_spread_and_ranked_average_over_valid_groups_only():
    # Two valid groups, ragged and interleaved: g7 r_CL [-.2, -.3, -.4, 0] (std .1, ranked),
    # g3 r_CL [-.5, -.5, 0] (std 0, tied); g5 has one correct (not valid) and a large r_CL
    # that would count if validity were only ">= 2 correct" or ">= 1 correct".
    groups = torch.tensor([7, 3, 7, 5, 3, 7, 5, 3, 7])
    r = [1, 1, 1, 1, 1, 1, 0, 0, 0]
    r_cl = [-0.2, -0.5, -0.3, -0.9, -0.5, -0.4, 0.0, 0.0, 0.0]
    d = _diag(r, r_cl, torch.tensor(r), groups)
    assert d["clipo/r_cl_spread"] == pytest.approx((0.1 + 0.0) / 2, abs=1e-12)
    assert d["clipo/ranked_frac"] == 0.5


def test_no_signal_is_zero_not_nan():
    # every group all-correct or all-wrong: mean |A(r)| = 0, no valid group -> 0, 0, 0
    groups = torch.tensor([0, 0, 1, 1])
    d = _diag([1, 1, 0, 0], [0.0] * 4, torch.tensor([1, 1, 0, 0]), groups)
    assert d == {"clipo/r_cl_spread": 0.0, "clipo/adv_share": 0.0, "clipo/ranked_frac": 0.0}


def test_ties_tolerate_float32_rounding_only():
    eps = torch.finfo(torch.float32).eps
    a0 = torch.tensor([0.5, 0.5, 0.5, -1.5])
    g = torch.zeros(4, dtype=torch.long)
    r_cl = torch.zeros(4)
    within = a0 + torch.tensor([0.0, 2 * eps, -2 * eps, 0.0])  # a few ulps: a tie
    beyond = a0 + torch.tensor([0.0, 1e-4, 0.0, 0.0])  # a real (small) ranking
    assert update_diagnostics(a0, within, r_cl, CORRECT, g)["clipo/ranked_frac"] == 0.0
    assert update_diagnostics(a0, beyond, r_cl, CORRECT, g)["clipo/ranked_frac"] == 1.0
    edge = a0 + torch.tensor([0.0, 2 * TIE_ULPS * eps, 0.0, 0.0])  # twice the tolerance
    assert update_diagnostics(a0, edge, r_cl, CORRECT, g)["clipo/ranked_frac"] == 1.0


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"r_cl must be \[B\]=4"):
        update_diagnostics(torch.zeros(4), torch.zeros(4), torch.zeros(3), CORRECT, [0] * 4)
