# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""anchors all / incorrect: incorrect anchors shape the head loss, not the reward (authors)."""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core import CLIPOConfig, contrastive_rewards, group_contrastive_loss

# Group of 4, tau = 0.5, cosine: e0 = e1 = [1, 0] correct, e2 = e3 = [0, 1] wrong.
# Every rollout has one positive (s = 2) and two negatives (s = 0), so for every anchor
#   InfoNCE L = -(2 - log(e^2 + 2 e^0)) = log(1 + 2 e^-2) = 0.2395447662
#   r = max(c - 0.2 L, -0.5): c = 0 -> -0.0479089532, c = 0.1 -> 0.0520910468.
EMB = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
CORRECT = torch.tensor([1, 1, 0, 0])
GIDS = torch.zeros(4, dtype=torch.long)
L = math.log1p(2 * math.exp(-2))


def _rewards(**kw):
    cfg = CLIPOConfig(temperature=0.5, **kw)
    res = group_contrastive_loss(EMB, CORRECT, GIDS, cfg)
    return res, contrastive_rewards(res, cfg).tolist()


@pytest.mark.parametrize("c", [0.0, 0.1])
def test_all_anchors_reward_only_the_correct_ones_by_default(c):
    res, r = _rewards(anchors="all", reward_constant=c)
    assert res.anchor_mask.tolist() == [True] * 4  # all four are anchors of the head loss
    torch.testing.assert_close(res.per_sample_loss, torch.full((4,), L, dtype=torch.float64))
    # Correct anchors: c - 0.2 L. Wrong ones: no contrastive reward, c as in a valid group
    # (the old code gave them c - 0.2 L as well).
    assert r == pytest.approx([c - 0.2 * L, c - 0.2 * L, c, c], abs=1e-12)


def test_reward_incorrect_anchors_is_the_explicit_option():
    res, r = _rewards(anchors="all", reward_incorrect_anchors=True, reward_constant=0.1)
    assert r == pytest.approx([0.1 - 0.2 * L] * 4, abs=1e-12)
    base, _ = _rewards(anchors="all", reward_constant=0.1)
    assert torch.equal(res.loss, base.loss)  # the head loss is the same either way


def test_incorrect_anchors_in_an_invalid_group_get_nothing():
    # 1 correct [1, 0], 2 wrong [0, 1]: invalid (< 2 correct), but wrong rollouts are anchors
    # (one positive s = 2, one negative s = 0): L = log(1 + e^-2) = 0.1269280110.
    emb, correct = EMB[1:], torch.tensor([1, 0, 0])
    l1 = math.log1p(math.exp(-2))
    for flag, expect in ((False, [0.0, 0.0, 0.0]), (True, [0.0, -0.2 * l1, -0.2 * l1])):
        cfg = CLIPOConfig(temperature=0.5, anchors="incorrect", reward_incorrect_anchors=flag)
        res = group_contrastive_loss(emb, correct, GIDS[:3], cfg)
        assert res.anchor_mask.tolist() == [False, True, True]
        assert contrastive_rewards(res, cfg).tolist() == pytest.approx(expect, abs=1e-12)


def test_reward_incorrect_anchors_is_validated():
    with pytest.raises(ValueError, match="reward_incorrect_anchors.*needs anchors='all'"):
        CLIPOConfig(reward_incorrect_anchors=True)  # anchors='correct': no wrong anchor
    with pytest.raises(ValueError, match="reward_incorrect_anchors.*must be a bool"):
        CLIPOConfig(anchors="all", reward_incorrect_anchors="yes")
