# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Ragged-group advantages and DAPO's dynamic-sampling filter vs hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core.advantages import dynamic_sampling_filter, group_advantages


def test_leave_one_out_hand_computed():
    # NeMo-RL convention: r = [1, 0, 0]; LOO baselines [0, 0.5, 0.5] -> centred [1, -0.5, -0.5];
    # std of the others: row 0 -> {0, 0} std 0 -> left undivided (A = 1);
    # rows 1, 2 -> {1, 0}: unbiased std sqrt(0.5) = 0.707107 -> A = -0.5 / 0.707108 = -0.707106
    r = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    a = group_advantages(r, torch.tensor([0, 0, 0]), leave_one_out=True)
    sd = math.sqrt(0.5) + 1e-6
    torch.testing.assert_close(
        a, torch.tensor([1.0, -0.5 / sd, -0.5 / sd], dtype=torch.float64), rtol=1e-12, atol=1e-12
    )
    # two rollouts: others are single -> std 0 -> A = r - other = [1, -1]
    a2 = group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([3, 3]), leave_one_out=True)
    torch.testing.assert_close(a2, torch.tensor([1.0, -1.0]), rtol=0, atol=0)


def test_matches_nemo_rl_formula_loop():
    # NeMo-RL's per-prompt loop (calculate_baseline_and_std_per_prompt + GRPOAdvantageEstimator),
    # re-derived here as a plain loop in float64
    gen = torch.Generator().manual_seed(5)
    r = torch.rand(50, generator=gen, dtype=torch.float64).round(decimals=1)
    g = torch.randint(0, 9, (50,), generator=gen)
    for loo in (False, True):
        a = group_advantages(r, g, leave_one_out=loo)
        for gid in g.unique():
            rows = (g == gid).nonzero().flatten().tolist()
            for i in rows:
                pool = [float(r[j]) for j in rows if not (loo and j == i)]
                if len(rows) == 1:
                    exp = 0.0
                else:
                    b = sum(pool) / len(pool)
                    sd = (
                        math.sqrt(sum((x - b) ** 2 for x in pool) / (len(pool) - 1))
                        if len(pool) > 1
                        else 0.0
                    )
                    exp = (float(r[i]) - b) / (sd + 1e-6) if sd > 0 else float(r[i]) - b
                assert abs(float(a[i]) - exp) < 1e-9, (loo, i)


def test_zero_std_group_gets_zero_and_order_invariance():
    r = torch.tensor([0.3, 0.3, 1.0, 0.0, 0.3])
    g = torch.tensor([4, 4, 9, 9, 4])
    a = group_advantages(r, g)
    assert a[[0, 1, 4]].abs().max() == 0
    perm = torch.tensor([3, 0, 4, 2, 1])
    torch.testing.assert_close(group_advantages(r[perm], g[perm]), a[perm], rtol=0, atol=0)


def test_dynamic_sampling_filter_hand_made():
    # groups: 1 -> [1,1,1] dropped; 2 -> [0,1] kept; 3 -> [0] (singleton) dropped; 5 -> [0.2, 0.0] kept
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.2, 0.0])
    g = torch.tensor([1, 2, 1, 2, 3, 1, 5, 5])
    res = dynamic_sampling_filter(r, g)
    assert res.keep.tolist() == [False, True, False, True, False, False, True, True]
    assert (res.num_groups, res.num_dropped_groups, res.num_dropped_rows) == (4, 2, 4)


def test_dynamic_sampling_then_advantages_equal_unfiltered_on_kept_rows():
    gen = torch.Generator().manual_seed(1)
    r = torch.randint(0, 2, (64,), generator=gen).double()
    g = torch.randint(0, 16, (64,), generator=gen)
    res = dynamic_sampling_filter(r, g)
    full = group_advantages(r, g)
    kept = group_advantages(r[res.keep], g[res.keep])
    torch.testing.assert_close(kept, full[res.keep], rtol=0, atol=0)
    assert full[~res.keep].abs().max() == 0


def test_errors():
    with pytest.raises(ValueError, match="must both be"):
        group_advantages(torch.zeros(3), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="must both be"):
        dynamic_sampling_filter(torch.zeros(3, 1), torch.zeros(3, 1, dtype=torch.long))
