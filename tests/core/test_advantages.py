# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Ragged-group advantages and DAPO's dynamic-sampling filter vs hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core.advantages import dynamic_sampling_filter, group_advantages


def test_leave_one_out_hand_computed():
    # group 0: r = [1, 0, 0]; LOO baselines [0, 0.5, 0.5] -> centred [1, -0.5, -0.5];
    # unbiased std sqrt(1/3) = 0.577350 -> A = [1.732048, -0.866024, -0.866024] (eps 1e-6)
    r = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    a = group_advantages(r, torch.tensor([0, 0, 0]), leave_one_out=True)
    sd = math.sqrt(1 / 3) + 1e-6
    torch.testing.assert_close(a, torch.tensor([1 / sd, -0.5 / sd, -0.5 / sd], dtype=torch.float64),
                               rtol=1e-12, atol=1e-12)


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
