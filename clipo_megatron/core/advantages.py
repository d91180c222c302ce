# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""GRPO group-normalised advantages on ragged groups.

A_i = (r'_i - mean_g r') / (std_g r' + eps), per group g given by group id
(unbiased std as NeMo-RL's GRPO; `normalize_std=False` gives Dr.GRPO-style
centring only; `leave_one_out` uses the mean of the *other* rollouts). CLIPO
adds its contrastive reward to r before this normalisation.
"""

from __future__ import annotations

import torch

from clipo_megatron.core.groups import GroupLayout


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, normalize_std: bool = True,
                     leave_one_out: bool = False, eps: float = 1e-6) -> torch.Tensor:
    """[B] advantages; rollouts alone in their group get 0."""
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must both be [B]")
    lay = GroupLayout.from_group_ids(group_ids)
    r = lay.to_padded(rewards.double(), fill=0.0)  # [N, G]
    valid = lay.slot_valid
    n = lay.sizes.double().unsqueeze(1)  # [N, 1]
    total = (r * valid).sum(1, keepdim=True)
    mean = total / n
    if leave_one_out:
        base = torch.where(n > 1, (total - r) / (n - 1).clamp_min(1), r)
    else:
        base = mean
    adv = r - base
    if normalize_std:
        var = (((r - mean) ** 2) * valid).sum(1, keepdim=True) / (n - 1).clamp_min(1)
        adv = adv / (var.sqrt() + eps)
    adv = torch.where(n > 1, adv, torch.zeros_like(adv))
    return lay.from_padded(adv).to(rewards.dtype if rewards.dtype.is_floating_point else torch.float32)
