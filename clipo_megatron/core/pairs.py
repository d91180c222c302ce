# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The `GroupPairs` a contrastive kernel reads, built from a batch's padded similarities.

Per group (padded [N, G, G] blocks): each anchor's positives, negatives and denominator sets,
which rollouts count as anchors, the sampled InfoNCE positive and the authors' eps term (the
rules are in core/contrastive_loss.py's docstring). Its own module so that `group_contrastive_loss`
reads as the outline it is: lay the batch out, compare, build the pairs, run the kernel,
reduce.
"""

from __future__ import annotations

import math

import torch

from clipo_megatron.core.config import CLIPOConfig
from clipo_megatron.core.contrastive_kernels import GroupPairs
from clipo_megatron.core.groups import GroupLayout
from clipo_megatron.core.sampling import counter_uniform, sample_positive_slots


def _pair_masks(
    lab: torch.Tensor, valid: torch.Tensor, include_anchor: bool, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """[N, G] labels, real slots -> [N, G, G] bool pos, neg, pair_den, neg_den of row anchors."""
    eye = torch.eye(valid.shape[1], dtype=torch.bool, device=device)
    pair = valid.unsqueeze(2) & valid.unsqueeze(1) & ~eye  # [N, G, G] distinct real pairs
    same = lab.unsqueeze(2) == lab.unsqueeze(1)  # [N, G, G]
    pos = pair & same  # [N, G, G] positives of row anchor
    neg = pair & ~same  # [N, G, G] negatives of row anchor
    if include_anchor:  # paper's eq. form: s_ii joins every denominator
        self_ = eye & valid.unsqueeze(2)  # [N, G, G]
        return pos, neg, pair | self_, neg | self_
    return pos, neg, pair, neg  # authors' code: the diagonal is removed


def _anchor_mask(
    lab: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, anchors: str
) -> torch.Tensor:
    """[N, G] bool: rollouts of the configured kind with >= 1 positive and >= 1 negative."""
    if anchors == "correct":
        kind = lab
    elif anchors == "incorrect":
        kind = ~lab
    else:
        kind = torch.ones_like(lab)
    return kind & valid & pos.any(-1) & neg.any(-1)


def _log_eps_phantom(sim: torch.Tensor, valid: torch.Tensor, log_eps: float) -> torch.Tensor | None:
    """[N, G] log of the authors' eps term: the row max (self incl.) + ln(eps); None: off."""
    if log_eps > 0:
        row = valid.unsqueeze(1) & valid.unsqueeze(2)  # [N, G, G]
        m = sim.masked_fill(~row, float("-inf")).amax(-1).detach()  # [N, G]
        return torch.where(torch.isfinite(m), m, torch.zeros_like(m)) + math.log(log_eps)
    return None


def build_group_pairs(
    sim: torch.Tensor,
    lab: torch.Tensor,
    layout: GroupLayout,
    sample_ids: torch.Tensor,
    cfg: CLIPOConfig,
    step: int,
) -> tuple[GroupPairs, torch.Tensor]:
    """What the loss kernel reads, and the [N, G, G] negatives the pair stats need."""
    valid = layout.slot_valid  # [N, G]
    pos, neg, pair_den, neg_den = _pair_masks(
        lab, valid, cfg.denominator_includes_anchor, sim.device
    )
    anchor = _anchor_mask(lab, valid, pos, neg, cfg.anchors)  # [N, G]
    # InfoNCE positive: uniform over P(i), keyed by (seed, step, group id, sample id).
    sid = layout.to_padded(sample_ids.long(), fill=0)  # [N, G]
    u = counter_uniform(cfg.seed, step, layout.group_keys.unsqueeze(1), sid)  # [N, G]
    pos_slot = sample_positive_slots(pos & anchor.unsqueeze(-1), u)  # [N, G]
    phantom = _log_eps_phantom(sim, valid, cfg.log_eps)
    all_others = cfg.denominator == "all_others"
    return GroupPairs(sim, pos, pair_den, neg_den, anchor, pos_slot, all_others, phantom), neg
