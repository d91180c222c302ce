# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A response with no token to pool leaves CLIPO's contrastive set; it never stops the run.

The rule: `member` rows only. Reference: the same loss on the batch with the non-member rows
removed (fp64, 1e-12: the same sums on the same rows), r_CL 0 for the removed rows whatever
the reward constant, their groups valid or not by the count of the rows left (hand-counted in
the comments), and `clipo/empty_responses` counting them.
"""

from __future__ import annotations

import pytest
import torch

from clipo_megatron.core import (
    CLIPOConfig,
    contrastive_metrics,
    contrastive_rewards,
    group_contrastive_loss,
)
from clipo_megatron.megatron.pooling.masked_mean import empty_rows, masked_mean, mean_from_sums

TOL = dict(rtol=0, atol=1e-12)


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(10, 6, generator=g, dtype=torch.float64)
    # group 7: rows 0-4, correct 1 1 1 0 0; group 3: rows 5-9, correct 1 1 0 1 0
    correct = torch.tensor([1, 1, 1, 0, 0, 1, 1, 0, 1, 0])
    gids = torch.tensor([7] * 5 + [3] * 5)
    sids = torch.arange(10) + 40
    return emb, correct, gids, sids


@pytest.mark.parametrize("loss_type", ["infonce", "supcon", "softnn"])
@pytest.mark.parametrize("step", [0, 3])
def test_member_rows_equal_the_batch_without_the_others(loss_type, step):
    emb, correct, gids, sids = _batch()
    cfg = CLIPOConfig(loss_type=loss_type, reward_constant=0.1)
    member = torch.ones(10, dtype=torch.bool)
    member[[1, 8]] = False
    keep = member.nonzero().flatten()
    e_all = emb.clone().requires_grad_(True)
    e_sub = emb[keep].clone().requires_grad_(True)
    res = group_contrastive_loss(
        e_all, correct, gids, cfg, step=step, sample_ids=sids, member=member
    )
    ref = group_contrastive_loss(
        e_sub, correct[keep], gids[keep], cfg, step=step, sample_ids=sids[keep]
    )
    assert res.num_anchors == ref.num_anchors > 0
    torch.testing.assert_close(res.loss, ref.loss, **TOL)
    torch.testing.assert_close(res.per_sample_loss[keep], ref.per_sample_loss, **TOL)
    assert res.anchor_mask[keep].tolist() == ref.anchor_mask.tolist()
    assert not res.anchor_mask[~member].any() and not res.valid_group[~member].any()
    # the sampled positive: the same row (batch indices mapped back) in both
    pos = res.positive_index[keep]
    ref_pos = torch.where(ref.positive_index >= 0, keep[ref.positive_index.clamp_min(0)], -1)
    assert pos.tolist() == ref_pos.tolist()
    r, r_ref = contrastive_rewards(res, cfg), contrastive_rewards(ref, cfg)
    torch.testing.assert_close(r[keep], r_ref, **TOL)
    assert r[~member].tolist() == [0.0, 0.0]  # not c = 0.1: outside the set, no reward at all
    res.loss.backward()
    ref.loss.backward()
    torch.testing.assert_close(e_all.grad[keep], e_sub.grad, **TOL)
    assert float(e_all.grad[~member].abs().max()) == 0.0
    m = contrastive_metrics(res, r)
    assert m["clipo/empty_responses"] == 2.0
    assert contrastive_metrics(ref, r_ref)["clipo/empty_responses"] == 0.0


def test_a_group_left_without_enough_rows_is_invalid():
    emb, correct, gids, sids = _batch()
    cfg = CLIPOConfig()
    # group 7 loses rows 0 and 1 -> correct 1 | 0 0: one correct, invalid (needs >= 2);
    # group 3 loses rows 7 and 9 -> 1 1 1: no incorrect, invalid (needs >= 1)
    member = torch.tensor([0, 0, 1, 1, 1, 1, 1, 0, 1, 0], dtype=torch.bool)
    res = group_contrastive_loss(emb, correct, gids, cfg, sample_ids=sids, member=member)
    assert res.num_anchors == 0 and not res.valid_group.any()
    assert contrastive_rewards(res, cfg).abs().max() == 0
    m = contrastive_metrics(res)
    assert m["clipo/valid_group_frac"] == 0.0 and m["clipo/empty_responses"] == 4.0
    # without the rule both groups are valid (3 correct + 2 incorrect each): 6 correct anchors
    full = group_contrastive_loss(emb, correct, gids, cfg, sample_ids=sids)
    assert full.num_anchors == 6 and bool(full.valid_group.all())


def test_every_row_empty_is_a_step_without_anchors():
    emb, correct, gids, sids = _batch()
    member = torch.zeros(10, dtype=torch.bool)
    res = group_contrastive_loss(emb, correct, gids, CLIPOConfig(), sample_ids=sids, member=member)
    assert res.num_anchors == 0 and float(res.loss) == 0.0
    assert contrastive_rewards(res, CLIPOConfig()).tolist() == [0.0] * 10


def test_an_empty_row_pools_to_zeros_when_allowed():
    h = torch.arange(24.0).view(2, 4, 3)  # [B, S, D]
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    with pytest.raises(ValueError, match=r"empty response\(s\) at rows \[1\]"):
        masked_mean(h, mask)  # the core API still refuses by default
    sums = torch.einsum("bsd,bs->bd", h, mask.float())
    counts = mask.sum(1).float()
    out = mean_from_sums(sums, counts, allow_empty=True)
    assert out.tolist() == [[4.5, 5.5, 6.5], [0.0, 0.0, 0.0]]  # (3 + 6) / 2, ...; row 1 empty
    assert empty_rows(counts).tolist() == [False, True]
