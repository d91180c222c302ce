# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Group advantages and the clipped PG loss vs hand-computed values / loops."""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core.advantages import group_advantages
from clipo_megatron.core.objectives import get_objective


def clipped_pg_loss(lp, old, adv, mask, eps_high=0.2):
    return get_objective("grpo").loss(lp, old, adv, mask, eps_high=eps_high)


def test_group_advantages_hand_computed_ragged():
    # Group 7: r = [1, 0, 0] -> mean 1/3, unbiased std sqrt(1/3) = 0.57735
    #   A = [(2/3)/0.57735, (-1/3)/0.57735, ...] = [1.154701, -0.577350, -0.577350]
    # Group 2: r = [1.2, 1.2] -> std 0 -> A = 0; group 5: a single rollout -> 0.
    r = torch.tensor([1.0, 1.2, 0.0, 1.2, 0.0, 1.0])
    g = torch.tensor([7, 2, 7, 2, 7, 5])
    a = group_advantages(r, g)
    sd = math.sqrt(1 / 3) + 1e-6  # eps = 1e-6 in the denominator
    exp = torch.tensor([(2 / 3) / sd, 0.0, (-1 / 3) / sd, 0.0, (-1 / 3) / sd, 0.0])
    torch.testing.assert_close(a, exp, rtol=1e-6, atol=1e-7)


def test_group_advantages_vs_loop_and_options():
    gen = torch.Generator().manual_seed(0)
    r = torch.rand(40, generator=gen, dtype=torch.float64)
    g = torch.randint(0, 6, (40,), generator=gen)
    for std, loo in [(True, False), (False, False), (False, True)]:
        a = group_advantages(r, g, normalize_std=std, leave_one_out=loo)
        for gid in g.unique():
            rows = (g == gid).nonzero().flatten()
            x = r[rows]
            if len(rows) == 1:
                assert float(a[rows]) == 0
                continue
            base = (x.sum() - x) / (len(x) - 1) if loo else x.mean()
            ref = x - base
            if std:
                ref = ref / (x.std() + 1e-6)
            torch.testing.assert_close(a[rows], ref, rtol=1e-12, atol=1e-12)


def test_clipped_pg_hand_computed():
    # One sequence, 2 tokens, A = 1: ratios e^0.5 = 1.6487 (clipped to 1.2), e^-0.1 = 0.9048.
    # loss = -(1.2 + 0.904837) / 2 = -1.052419
    lp = torch.tensor([[0.5, -0.1]])
    loss, m = clipped_pg_loss(lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    assert float(loss) == pytest.approx(-(1.2 + math.exp(-0.1)) / 2, abs=1e-6)
    assert m["pg/clip_frac"] == 0.5
    # DAPO's asymmetric clip (0.2 / 0.28): the first ratio clips at 1.28 instead.
    loss, _ = clipped_pg_loss(
        lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), eps_high=0.28
    )
    assert float(loss) == pytest.approx(-(1.28 + math.exp(-0.1)) / 2, abs=1e-6)


def test_on_policy_gradient_is_policy_gradient():
    lp = torch.randn(3, 4, requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    loss, _ = clipped_pg_loss(lp, lp.detach(), adv, mask)
    loss.backward()
    torch.testing.assert_close(lp.grad, -(adv.unsqueeze(1) * mask) / mask.sum())


def test_shape_errors():
    with pytest.raises(ValueError, match="must match"):
        clipped_pg_loss(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="advantages"):
        clipped_pg_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="must both be"):
        group_advantages(torch.zeros(3), torch.zeros(4, dtype=torch.long))
