# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The contrastive-loss registry: a new loss is one kernel + one registration, and then
`CLIPOConfig`, `group_contrastive_loss` and the rewards use it (against a naive loop here)."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from clipo_megatron.core import CLIPOConfig, contrastive_rewards, group_contrastive_loss
from clipo_megatron.core import contrastive_kernels as registry
from clipo_megatron.core.contrastive_kernels import (
    CONTRASTIVE_LOSSES,
    ContrastiveLoss,
    GroupPairs,
    get_contrastive_loss,
    register_contrastive_loss,
)

TOY_LAMBDA = 0.5


def margin_kernel(p: GroupPairs) -> torch.Tensor:
    """Toy loss: mean similarity to the negatives minus mean similarity to the positives."""
    neg = p.pair_den & ~p.pos  # [N, G, G] (no s_ii: denominator_includes_anchor is off)
    mean_neg = (p.sim * neg).sum(-1) / neg.sum(-1).clamp_min(1)  # [N, G]
    mean_pos = (p.sim * p.pos).sum(-1) / p.pos.sum(-1).clamp_min(1)  # [N, G]
    return mean_neg - mean_pos


def margin_reference(emb: torch.Tensor, correct: list[int], gids: list[int], tau: float):
    """Naive loop: [B] toy loss per correct anchor with >= 1 positive and >= 1 negative."""
    e = emb / emb.norm(dim=-1, keepdim=True)
    out = torch.zeros(len(correct), dtype=emb.dtype)
    for i in range(len(correct)):
        mates = [j for j in range(len(correct)) if j != i and gids[j] == gids[i]]
        pos = [float(e[i] @ e[j]) / tau for j in mates if correct[j] == correct[i]]
        neg = [float(e[i] @ e[j]) / tau for j in mates if correct[j] != correct[i]]
        if correct[i] and pos and neg:
            out[i] = sum(neg) / len(neg) - sum(pos) / len(pos)
    return out


@contextlib.contextmanager
def toy_loss_registered(name: str = "margin"):
    """Register the toy loss for the block, and remove it after (the registry is global)."""
    register_contrastive_loss(ContrastiveLoss(name, margin_kernel, TOY_LAMBDA, "toy margin"))
    try:
        yield name
    finally:
        CONTRASTIVE_LOSSES.pop(name)


CORRECT = [1, 1, 0, 1, 0, 1, 1, 1, 0, 0]
GIDS = [5, 5, 5, 5, 5, 9, 9, 9, 9, 3]  # group 3: one rollout, no anchor


def test_a_registered_toy_loss_runs_through_the_config_the_loss_and_the_rewards():
    gen = torch.Generator().manual_seed(7)
    emb = torch.randn(len(CORRECT), 6, dtype=torch.float64, generator=gen)
    with toy_loss_registered() as name:
        cfg = CLIPOConfig.from_dict({"loss_type": name, "temperature": 0.5})
        assert cfg.lam == TOY_LAMBDA  # the registry's default lambda
        res = group_contrastive_loss(emb, torch.tensor(CORRECT), torch.tensor(GIDS), cfg)
        rewards = contrastive_rewards(res, cfg)
    want = margin_reference(emb, CORRECT, GIDS, 0.5)
    torch.testing.assert_close(res.per_sample_loss, want, rtol=0, atol=1e-12)
    anchors = [0, 1, 3, 5, 6, 7]
    assert res.anchor_mask.nonzero().flatten().tolist() == anchors
    torch.testing.assert_close(res.loss, want.sum() / len(anchors), rtol=0, atol=1e-12)
    # r_CL = max(0 - 0.5 * L_i, -0.5) on anchors, 0 elsewhere (reward_constant 0).
    torch.testing.assert_close(rewards, (-TOY_LAMBDA * want).clamp_min(-0.5), rtol=0, atol=1e-12)
    assert name not in CONTRASTIVE_LOSSES  # cleaned up
    with pytest.raises(ValueError, match="loss_type='margin' is not one of"):
        CLIPOConfig(loss_type=name)


def test_toy_loss_by_hand():
    # Group of 3, tau = 0.5: e0 = e1 = [1, 0] correct, e2 = [0, 1] wrong. Anchors 0 and 1:
    # s01 = 1 / 0.5 = 2, s02 = 0 -> L = 0 - 2 = -2; reward max(-0.5 * -2, -0.5) = 1.0.
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    with toy_loss_registered() as name:
        cfg = CLIPOConfig(loss_type=name, temperature=0.5)
        res = group_contrastive_loss(emb, torch.tensor([1, 1, 0]), torch.zeros(3).long(), cfg)
        r = contrastive_rewards(res, cfg)
    assert res.per_sample_loss.tolist() == [-2.0, -2.0, 0.0]
    assert r.tolist() == [1.0, 1.0, 0.0]


def test_builtin_losses_are_registered_with_their_kernels_and_paper_lambdas():
    got = {n: (loss.kernel, loss.default_lambda) for n, loss in CONTRASTIVE_LOSSES.items()}
    assert got == {
        "infonce": (registry.infonce, 0.2),
        "supcon": (registry.supcon, 0.2),
        "softnn": (registry.softnn, 1.0),
    }


def test_unknown_loss_is_one_line_naming_the_registered_ones():
    with pytest.raises(ValueError) as e:
        CLIPOConfig(loss_type="triplet")
    msg = str(e.value)
    assert "\n" not in msg
    assert "loss_type='triplet'" in msg and "['infonce', 'softnn', 'supcon']" in msg
    assert msg == str(pytest.raises(ValueError, get_contrastive_loss, "triplet").value)


def test_registration_errors():
    with pytest.raises(ValueError, match="'infonce' is already registered"):
        register_contrastive_loss(ContrastiveLoss("infonce", margin_kernel, 0.2))
    for bad in (-0.1, math.nan):
        with pytest.raises(ValueError, match="default_lambda must be finite, >= 0"):
            ContrastiveLoss("bad", margin_kernel, bad)
    assert set(CONTRASTIVE_LOSSES) == {"infonce", "supcon", "softnn"}
