# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Bad input gets a clear error naming the problem; config validation."""

from __future__ import annotations

import pytest
import torch

from clipo_megatron.core import CLIPOConfig, GroupLayout, group_contrastive_loss, shaped_rewards


def _ok():
    return torch.randn(6, 4), torch.tensor([1, 1, 0, 1, 0, 0]), torch.tensor([0, 0, 0, 1, 1, 1])


def test_non_binary_rewards():
    e, c, g = _ok()
    with pytest.raises(ValueError, match=r"binary.*rows \[1\] have \[0.5\]"):
        group_contrastive_loss(e, torch.tensor([1.0, 0.5, 0, 1, 0, 0]), g, CLIPOConfig())


def test_nan_inf_embeddings():
    e, c, g = _ok()
    e[3, 1] = float("nan")
    e[5, 0] = float("inf")
    with pytest.raises(ValueError, match=r"NaN/inf at rows \[3, 5\]"):
        group_contrastive_loss(e, c, g, CLIPOConfig())


def test_mismatched_lengths_and_shapes():
    e, c, g = _ok()
    with pytest.raises(ValueError, match="group_ids must be"):
        group_contrastive_loss(e, c, g[:-1], CLIPOConfig())
    with pytest.raises(ValueError, match="correct/rewards must be"):
        group_contrastive_loss(e, c[:-2], g, CLIPOConfig())
    with pytest.raises(ValueError, match=r"embeddings must be \[B, d\]"):
        group_contrastive_loss(e.unsqueeze(0), c, g, CLIPOConfig())
    with pytest.raises(ValueError, match="shape"):
        shaped_rewards(torch.zeros(3), torch.zeros(4))


def test_group_ids_that_do_not_fit():
    e, c, g = _ok()
    with pytest.raises(ValueError, match="negative ids at rows"):
        group_contrastive_loss(e, c, torch.tensor([0, 0, -1, 1, 1, 1]), CLIPOConfig())
    with pytest.raises(ValueError, match="integer tensor"):
        group_contrastive_loss(e, c, g.float(), CLIPOConfig())
    with pytest.raises(ValueError, match="group id 1 has 4 rollouts, more than max_group_size=3"):
        group_contrastive_loss(
            e, c, torch.tensor([0, 0, 1, 1, 1, 1]), CLIPOConfig(max_group_size=3)
        )
    with pytest.raises(ValueError, match="unique within each group"):
        group_contrastive_loss(e, c, g, CLIPOConfig(), sample_ids=torch.tensor([0, 0, 1, 2, 3, 4]))


def test_layout_roundtrip_ragged():
    g = torch.tensor([7, 2, 7, 7, 9, 2])
    lay = GroupLayout.from_group_ids(g)
    assert lay.group_keys.tolist() == [2, 7, 9]
    assert lay.sizes.tolist() == [2, 3, 1]
    assert lay.index.tolist() == [[1, 5, -1], [0, 2, 3], [4, -1, -1]]
    x = torch.arange(6.0) * 10
    assert torch.equal(lay.from_padded(lay.to_padded(x)), x)


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(loss_type="triplet"), "loss_type"),
        (dict(reward_clip_min=0.3), "reward_clip_min"),
        (dict(reward_lambda=-1.0), "reward_lambda"),
        (dict(embed_dim=0), "embed_dim"),
        (dict(warmup_steps=-2), "warmup_steps"),
        (dict(max_group_size=1), "max_group_size"),
        (dict(anchors="some"), "anchors"),
    ],
)
def test_config_out_of_range(kw, msg):
    with pytest.raises(ValueError, match=msg):
        CLIPOConfig(**kw)


def test_config_defaults_and_from_dict():
    assert CLIPOConfig().lam == 0.2
    assert CLIPOConfig(loss_type="softnn").lam == 1.0
    assert CLIPOConfig(loss_type="supcon").lam == 0.2
    assert CLIPOConfig(reward_lambda=0.5, loss_type="softnn").lam == 0.5
    cfg = CLIPOConfig.from_dict({"temperature": 0.02, "embed_dim": 2048})
    assert cfg.temperature == 0.02 and cfg.embed_dim == 2048
    with pytest.raises(
        ValueError,
        match=r"unknown key clipo\.method\.temprature \(did you mean clipo\.method\.temperature\?\)",
    ):
        CLIPOConfig.from_dict({"temprature": 0.02})
