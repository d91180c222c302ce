# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper's per-sample InfoNCE keeps the anchor in its denominator (sum over j = 1..G); the
authors' code and this project leave it out. Both forms on one group, by hand, and what the
paper's form does to r_CL's within-group spread (docs/reproduce.md, bench/bench_denominator.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core import CLIPOConfig, contrastive_rewards, group_contrastive_loss

# One group: correct a = (1, 0), b = (0.8, 0.6), incorrect n = (0.6, -0.8).
# cos(a, b) = 0.8, cos(a, n) = 0.6, cos(b, n) = 0; at tau 0.05: s_ab = 16, s_an = 12, s_bn = 0,
# s_ii = 1 / tau = 20. With two correct rollouts each anchor's positive is the other one.
EMB = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.6, -0.8]], dtype=torch.float64)
CORRECT = torch.tensor([1, 1, 0])
GROUPS = torch.zeros(3, dtype=torch.long)


def _rewards(includes_anchor: bool) -> list[float]:
    cfg = CLIPOConfig(temperature=0.05, denominator_includes_anchor=includes_anchor)
    res = group_contrastive_loss(EMB, CORRECT, GROUPS, cfg)
    return contrastive_rewards(res, cfg)[:2].tolist()  # the two correct anchors


def test_anchor_left_out_ranks_the_two_correct_rollouts():
    # L_a = -16 + log(e^16 + e^12) = log(1 + e^-4) = 0.0181499; r_a = -0.2 L_a = -0.0036300
    # L_b = -16 + log(e^16 + e^0) = log(1 + e^-16) = 1.1254e-7;  r_b = -2.2507e-8
    r_a, r_b = _rewards(False)
    assert r_a == pytest.approx(-0.2 * math.log1p(math.exp(-4)), abs=1e-12)
    assert r_b == pytest.approx(-0.2 * math.log1p(math.exp(-16)), abs=1e-12)
    assert r_b - r_a == pytest.approx(0.0036300, abs=1e-7)  # spread: CLIPO moves the advantages


def test_anchor_kept_clamps_both_and_the_spread_is_gone():
    # L_a = -16 + log(e^20 + e^16 + e^12) = 4 + log(1 + e^-4 + e^-8) = 4.01848 -> -0.8037
    # L_b = -16 + log(e^20 + e^16 + e^0) = 4 + log(1 + e^-4 + e^-20) = 4.01815 -> -0.8036
    # both below the -0.5 clamp: r_CL is -0.5 for both, the same value, so GRPO's advantages
    # are unchanged (group normalisation ignores a shift shared by the group's correct rollouts)
    assert _rewards(True) == [-0.5, -0.5]


def test_the_kept_anchor_clamps_below_cosine_0875_at_tau_005():
    """L ~ (1 - cos(i, p)) / tau + log(1 + ...) with the anchor kept: unclamped needs
    0.2 (1 - cos) / 0.05 < 0.5, i.e. cos > 0.875. b at cosine 0.95 from a: L = 1 + log(1 +
    e^-1 + ...) = 1.3133 (negative n far away) -> r = -0.2627 for both anchors."""
    emb = torch.tensor(
        [[1.0, 0.0], [0.95, math.sqrt(1 - 0.95**2)], [-1.0, 0.0]], dtype=torch.float64
    )
    cfg = CLIPOConfig(temperature=0.05, denominator_includes_anchor=True)
    res = group_contrastive_loss(emb, CORRECT, GROUPS, cfg)
    r = contrastive_rewards(res, cfg)[:2]
    # -19 + log(e^20 + e^19 + e^-20) = 1 + log(1 + e^-1 + e^-40)
    assert r.tolist() == pytest.approx([-0.2 * (1 + math.log1p(math.exp(-1)))] * 2, abs=1e-9)
