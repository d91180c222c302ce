# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Contrastive reward r_CL and the shaped reward r' = r + r_CL (paper Sec. 3.2).

    r_CL_i = max(c - lambda * L_i * [i is a rewarded anchor], clip_min)   every row

as the authors' code (`contant_reward - lambda * (loss * correct)`, then clamp): a row that
is no rewarded anchor, in a valid group or not, gets max(c, clip_min) (c = 0 by default).
A row outside the contrastive set (`ContrastiveResult.member`: nothing pooled) gets 0.

Rewarded anchors are the correct ones (`ContrastiveResult.reward_mask`): with
`anchors: all` or `incorrect` the incorrect anchors shape the head's loss but,
as in the authors' reward, get no contrastive reward, so a failed rollout keeps
r_i (+ c). `reward_incorrect_anchors: true` rewards every counted anchor instead.

c is the authors' `contant_reward` (0 by default), lambda 0.2 (InfoNCE,
SupCon) or 1.0 (SoftNN), clip_min -0.5. The reward is detached: the policy
gradient sees it as a number, only the head learns from the loss. r' enters
the advantage estimator before group normalisation.
"""

from __future__ import annotations

import torch

from clipo_megatron.core.config import CLIPOConfig
from clipo_megatron.core.contrastive_loss import ContrastiveResult


def contrastive_rewards(result: ContrastiveResult, cfg: CLIPOConfig) -> torch.Tensor:
    """[B] detached contrastive rewards from a `ContrastiveResult`."""
    loss = result.per_sample_loss.detach()  # [B]
    counted = torch.where(result.reward_mask, loss, torch.zeros_like(loss))  # [B] L_i * [anchor_i]
    r = torch.clamp(cfg.reward_constant - cfg.lam * counted, min=cfg.reward_clip_min)  # [B]
    return torch.where(result.member, r, torch.zeros_like(r))  # [B]


def shaped_rewards(rewards: torch.Tensor, r_cl: torch.Tensor) -> torch.Tensor:
    """r' = r + r_CL, with a shape check (the two must describe the same rollouts)."""
    if rewards.shape != r_cl.shape:
        raise ValueError(
            f"rewards shape {tuple(rewards.shape)} != contrastive rewards shape {tuple(r_cl.shape)}"
        )
    return rewards.to(r_cl.dtype) + r_cl
