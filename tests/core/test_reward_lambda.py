# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""reward_lambda follows the loss unless set: the recipes must not pin InfoNCE's 0.2 on SoftNN."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from clipo_megatron.core import CLIPOConfig, contrastive_rewards, group_contrastive_loss

BASE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "clipo_base.yaml"


def _base_method() -> dict:
    method = dict(yaml.safe_load(BASE.read_text())["clipo"]["method"])
    method.pop("max_group_size")  # an OmegaConf interpolation, irrelevant here
    return method


@pytest.mark.parametrize("loss_type,lam", [("infonce", 0.2), ("supcon", 0.2), ("softnn", 1.0)])
def test_base_recipe_gives_each_loss_its_paper_lambda(loss_type, lam):
    # Paper: lambda 0.2 for InfoNCE / SupCon, 1.0 for SoftNN. The recipe used to set
    # reward_lambda: 0.2 for every loss, so `loss_type: softnn` got 0.2.
    cfg = CLIPOConfig.from_dict({**_base_method(), "loss_type": loss_type})
    assert cfg.lam == lam


def test_softnn_reward_through_the_base_recipe_uses_lambda_one():
    # Group of 3, tau = 0.5: e0 = e1 = [1, 0] correct, e2 = [0, 1] wrong.
    # Anchor 0: P = {1}, s01 = 2, s02 = 0. SoftNN: L0 = -(2 - log(e^2 + 1)) = log(1 + e^-2)
    #   = 0.1269280110. Reward with lambda 1.0: -0.1269280110 (0.2 would give -0.0253856022).
    cfg = CLIPOConfig.from_dict({**_base_method(), "loss_type": "softnn", "temperature": 0.5})
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    res = group_contrastive_loss(
        emb, torch.tensor([1, 1, 0]), torch.zeros(3, dtype=torch.long), cfg
    )
    r = contrastive_rewards(res, cfg)
    expect = -math.log1p(math.exp(-2))
    torch.testing.assert_close(r, torch.tensor([expect, expect, 0.0], dtype=r.dtype))


def test_explicit_lambda_wins_over_the_loss_default():
    assert CLIPOConfig(loss_type="softnn", reward_lambda=0.2).lam == 0.2
    assert CLIPOConfig(loss_type="infonce", reward_lambda=1.0).lam == 1.0
    assert CLIPOConfig.from_dict({"loss_type": "softnn", "reward_lambda": None}).lam == 1.0


@pytest.mark.parametrize("bad", ["0.2", True, float("nan"), -0.1])
def test_bad_lambda_names_the_field(bad):
    with pytest.raises(ValueError, match="reward_lambda.*None for the loss's paper default"):
        CLIPOConfig(reward_lambda=bad)
