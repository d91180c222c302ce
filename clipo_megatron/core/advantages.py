# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""GRPO group-normalised advantages on ragged groups, and DAPO's dynamic-sampling filter.

A_i = (r'_i - b_g) / (std_g r' + eps), per group g given by group id (never
"every G rows"). b_g is the group mean, or with `leave_one_out` the mean of
the *other* rollouts (NeMo-RL `use_leave_one_out_baseline`). std follows
NeMo-RL's `calculate_baseline_and_std_per_prompt` (the supported versions'): the
unbiased std of the group, or with leave-one-out the unbiased std of the
*other* rollouts (0 when fewer than 2 others). Division happens only where
std > 0 (elsewhere A is the centred reward, which is 0 for the plain group
std); `normalize_std=False` gives Dr.GRPO-style centring. Rollouts alone in
their group get A = 0.
CLIPO adds its contrastive reward to r before this normalisation (paper
Sec. 3, r'_i = r_i + r_i^CL).

DAPO dynamic sampling (paper App., DAPO baseline): drop every group whose
rewards are all equal (no signal); report how many groups were dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clipo_megatron.core.groups import GroupIds, GroupLayout, as_group_ids


def group_advantages(
    rewards: torch.Tensor,
    group_ids: GroupIds,
    *,
    normalize_std: bool = True,
    leave_one_out: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """rewards [B], group_ids [B] -> advantages [B] (float64 math, returned in rewards' float dtype).

    group_ids: ints or any hashable ids (`as_group_ids`).
    """
    group_ids = as_group_ids(group_ids, device=rewards.device)
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must both be [B]"
        )
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if rewards.numel() == 0:
        return rewards.to(torch.float32 if not rewards.dtype.is_floating_point else rewards.dtype)
    lay = GroupLayout.from_group_ids(group_ids)
    r = lay.to_padded(rewards.double(), fill=0.0)  # [N, G]
    valid = lay.slot_valid  # [N, G]
    n = lay.sizes.double().unsqueeze(1)  # [N, 1]
    total = (r * valid).sum(1, keepdim=True)  # [N, 1]
    mean = total / n  # [N, 1]
    if leave_one_out:
        base = torch.where(n > 1, (total - r) / (n - 1).clamp_min(1), r)  # [N, G]
    else:
        base = mean
    adv = r - base  # [N, G]
    if normalize_std:
        if leave_one_out:
            # std of the other n-1 rollouts: sum of squared deviations from their mean / (n - 2)
            # (two-pass form over [N, G, G] blocks, no E[x^2] - E[x]^2 cancellation)
            g_max = r.shape[1]
            others = valid.unsqueeze(1) & ~torch.eye(g_max, dtype=torch.bool).unsqueeze(
                0
            )  # [N, G(i), G(j)]
            dev = (r.unsqueeze(1) - base.unsqueeze(2)) ** 2  # [N, G(i), G(j)]
            m2 = (dev * others).sum(2)  # [N, G]
            var = torch.where(n > 2, m2 / (n - 2).clamp_min(1), torch.zeros_like(m2))
        else:
            var = (((r - mean) ** 2) * valid).sum(1, keepdim=True) / (n - 1).clamp_min(1)  # [N, 1]
        std = var.sqrt()
        adv = torch.where(std > 0, adv / (std + eps), adv)
    adv = torch.where(n > 1, adv, torch.zeros_like(adv))
    out_dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
    return lay.from_padded(adv).to(out_dtype)


@dataclass
class DynamicSamplingResult:
    keep: torch.Tensor  # [B] bool, rows of groups with at least two distinct rewards
    num_groups: int  # groups seen
    num_dropped_groups: int  # groups whose rewards were all equal (incl. singletons)
    num_dropped_rows: int


def dynamic_sampling_filter(
    rewards: torch.Tensor, group_ids: GroupIds, *, atol: float = 0.0
) -> DynamicSamplingResult:
    """DAPO filter: keep rows whose group has max(r) - min(r) > atol. Order is preserved."""
    group_ids = as_group_ids(group_ids, device=rewards.device)
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must both be [B]"
        )
    if rewards.numel() == 0:
        return DynamicSamplingResult(torch.zeros(0, dtype=torch.bool), 0, 0, 0)
    lay = GroupLayout.from_group_ids(group_ids)
    r = rewards.double()
    hi = lay.to_padded(r, fill=float("-inf")).amax(1)  # [N]
    lo = lay.to_padded(r, fill=float("inf")).amin(1)  # [N]
    informative = (hi - lo) > atol  # [N]
    keep = lay.from_padded(informative.unsqueeze(1).expand(-1, lay.slot_valid.shape[1]))  # [B]
    n_groups = int(informative.numel())
    return DynamicSamplingResult(
        keep=keep.bool(),
        num_groups=n_groups,
        num_dropped_groups=n_groups - int(informative.sum()),
        num_dropped_rows=int((~keep.bool()).sum()),
    )
