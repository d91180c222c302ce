# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Did CLIPO change the update? Three numbers per step, from values the step already has.

Why: with binary rewards, if every correct rollout of a group gets the same r_CL, then
r' = r + r_CL is still two-valued per group and group normalisation (r' - mean) / std returns
exactly GRPO's advantages: CLIPO changed nothing. CLIPO acts only through the spread of r_CL
among a group's correct rollouts (docs/method.md, "Does CLIPO change the update?").

    clipo/r_cl_spread  mean over valid groups of the (unbiased) std of r_CL among the group's
                       correct rollouts; 0 when no group is valid
    clipo/adv_share    mean_i |A(r')_i - A(r)_i| / mean_i |A(r)_i| over the step's rows, A the
                       objective's own estimator; 0 when mean |A(r)| = 0 (then no group has mixed
                       rewards, r_CL is constant in every group and A(r') = A(r) = 0 as well)
    clipo/ranked_frac  fraction of valid groups whose correct rollouts' A(r') are not all ties;
                       0 when no group is valid

A valid group is CLIPO's (`losses.valid_groups`): >= 2 correct and >= 1 incorrect rollouts.
"""

from __future__ import annotations

import torch

from clipo_megatron.core.contrastive_loss import check_binary, valid_groups
from clipo_megatron.core.groups import GroupIds, GroupLayout, as_group_ids

# Two advantages tie when they differ by at most TIE_ULPS units in the last place of the
# advantages' dtype, at the group's largest |A| (at least 1): float32 rounding of equal r'
# computed in different orders stays far inside it, any real ranking far outside.
TIE_ULPS = 16


def tie_tolerance(dtype: torch.dtype, scale: torch.Tensor) -> torch.Tensor:
    """[N] largest |A| per group -> [N] the tie tolerance (TIE_ULPS ulps at max(scale, 1))."""
    return TIE_ULPS * torch.finfo(dtype).eps * scale.clamp_min(1.0)


def update_diagnostics(
    adv_plain: torch.Tensor,
    adv_shaped: torch.Tensor,
    r_cl: torch.Tensor,
    correct: torch.Tensor,
    group_ids: GroupIds,
) -> dict[str, float]:
    """adv_plain = A(r) [B], adv_shaped = A(r') [B], r_cl [B], correct [B] (bool or 0 / 1),
    group_ids [B] -> {clipo/r_cl_spread, clipo/adv_share, clipo/ranked_frac}."""
    b = adv_plain.shape[0]
    for name, t in (("adv_shaped", adv_shaped), ("r_cl", r_cl), ("correct", correct)):
        if t.shape != (b,):
            raise ValueError(f"{name} must be [B]={b} like adv_plain, got {tuple(t.shape)}")
    if b == 0:
        return {"clipo/r_cl_spread": 0.0, "clipo/adv_share": 0.0, "clipo/ranked_frac": 0.0}
    lay = GroupLayout.from_group_ids(as_group_ids(group_ids, device=adv_plain.device))
    lab = lay.to_padded(check_binary(correct.cpu()).to(adv_plain.device), fill=False)  # [N, G]
    ok = valid_groups(lab, lay.slot_valid)  # [N]
    cc = lab & lay.slot_valid & ok.unsqueeze(1)  # [N, G] correct rollouts of valid groups
    n_valid = int(ok.sum())

    x = lay.to_padded(r_cl.detach().double(), fill=0.0)  # [N, G]
    n = cc.sum(1, keepdim=True).double()  # [N, 1]
    mean = (x * cc).sum(1, keepdim=True) / n.clamp_min(1)  # [N, 1]
    std = ((((x - mean) ** 2) * cc).sum(1) / (n.squeeze(1) - 1).clamp_min(1)).sqrt()  # [N]
    spread = float(std[ok].mean()) if n_valid else 0.0

    a, a0 = adv_shaped.detach().double(), adv_plain.detach().double()  # [B]
    den = float(a0.abs().mean())
    share = float((a - a0).abs().mean()) / den if den > 0 else 0.0

    ap = lay.to_padded(a, fill=0.0)  # [N, G]
    hi = torch.where(cc, ap, float("-inf")).amax(1)  # [N]
    lo = torch.where(cc, ap, float("inf")).amin(1)  # [N]
    tol = tie_tolerance(adv_shaped.dtype, torch.where(cc, ap.abs(), 0.0).amax(1))  # [N]
    ranked = ok & ((hi - lo) > tol)  # [N]
    frac = float(ranked.sum()) / n_valid if n_valid else 0.0
    return {"clipo/r_cl_spread": spread, "clipo/adv_share": share, "clipo/ranked_frac": frac}
