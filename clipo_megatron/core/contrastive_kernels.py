# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The group contrastive losses, in one registry: name -> per-anchor kernel + paper lambda.

`group_contrastive_loss` (core/contrastive_loss.py) prepares what every loss reads once
per batch — similarities, positive / negative / denominator masks, anchors, the
sampled InfoNCE positive — as `GroupPairs` (built in core/pairs.py), then calls the kernel of
`CLIPOConfig.loss_type`. `CLIPOConfig` validates `loss_type` against this
registry and reads the loss's default reward weight lambda from it (`lam`).

Adding a loss is one kernel `(GroupPairs) -> [N, G]` and one
`register_contrastive_loss(ContrastiveLoss(name, kernel, default_lambda))`.

Kernels (paper App. "Contrastive Loss Variants"; A(i) = the denominator set):
    InfoNCE: L_i = -(s_ip* - logsumexp_{j in A(i)} s_ij),  p* ~ U(P(i))
    SupCon : L_i = -1/|P(i)| sum_{p in P(i)} (s_ip - logsumexp_{j in A(i)} s_ij)
    SoftNN : L_i = -(logsumexp_{p in P(i)} s_ip - logsumexp_{j in A(i)} s_ij)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from clipo_megatron.core.registry import Registry


@dataclass(frozen=True)
class GroupPairs:
    """What every kernel reads, padded per group (N groups of up to G rollouts)."""

    sim: torch.Tensor  # [N, G, G] s_ij = similarity / temperature
    pos: torch.Tensor  # [N, G, G] bool, j is a positive of row anchor i (same label, j != i)
    pair_den: torch.Tensor  # [N, G, G] bool, every other rollout (+ s_ii if configured)
    neg_den: torch.Tensor  # [N, G, G] bool, negatives (+ s_ii if configured)
    anchor: torch.Tensor  # [N, G] bool, counted anchors (>= 1 positive and >= 1 negative)
    pos_slot: torch.Tensor  # [N, G] long, slot of the sampled positive, -1 if none
    all_others: bool  # CLIPOConfig.denominator == "all_others"
    # [N, G] log of the authors' eps term (CLIPOConfig.log_eps): M_i + ln(eps), M_i the row max
    # of s_ij over the group, self included; None: off.
    phantom: torch.Tensor | None = None

    def lse(self, mask: torch.Tensor) -> torch.Tensor:
        """logsumexp_{j in mask} s_ij, with the eps phantom term when configured: [N, G]."""
        out = masked_logsumexp(self.sim, mask)
        if self.phantom is None:
            return out
        return torch.where(mask.any(-1), torch.logaddexp(out, self.phantom), out)


# (pairs) -> per-anchor loss [N, G]; values at non-anchors are discarded by the caller.
Kernel = Callable[[GroupPairs], torch.Tensor]


@dataclass(frozen=True)
class ContrastiveLoss:
    """One group contrastive loss and the reward weight lambda the paper runs it with."""

    name: str
    kernel: Kernel
    default_lambda: float  # r_CL = max(c - lambda * L_i, clip_min) when reward_lambda is None
    summary: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.default_lambda) and self.default_lambda >= 0):
            raise ValueError(f"contrastive loss {self.name}: default_lambda must be finite, >= 0")


CONTRASTIVE_LOSSES: Registry[ContrastiveLoss] = Registry(
    "contrastive loss",
    "CLIPOConfig.loss_type={name!r} is not one of {choices} (set clipo.method.loss_type)",
)
register_contrastive_loss = CONTRASTIVE_LOSSES.register  # adds a loss `loss_type` can name
get_contrastive_loss = CONTRASTIVE_LOSSES.lookup


def masked_logsumexp(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """logsumexp over the last dim where mask; rows without entries give 0 (and zero grad)."""
    has_any = mask.any(-1)
    m = x.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)  # row max (stability)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    s = torch.exp((x - m).masked_fill(~mask, float("-inf"))).sum(-1)  # [..]
    out = torch.log(torch.where(has_any, s, torch.ones_like(s))) + m.squeeze(-1)
    return torch.where(has_any, out, torch.zeros_like(out))


def infonce(p: GroupPairs) -> torch.Tensor:
    """One sampled positive p* against A(i) ("positive_and_negatives": {p*} u negatives)."""
    onehot = torch.zeros_like(p.pos)
    onehot.scatter_(2, p.pos_slot.clamp_min(0).unsqueeze(-1), True)
    onehot &= p.anchor.unsqueeze(-1)  # [N, G, G]
    den = p.pair_den if p.all_others else (onehot | p.neg_den)
    s_pos = (p.sim * onehot).sum(-1)  # [N, G]
    return -(s_pos - p.lse(den))


def supcon(p: GroupPairs) -> torch.Tensor:
    """Mean over positives ("positive_and_negatives": each p against {p} u negatives)."""
    n_pos = p.pos.sum(-1).clamp_min(1)  # [N, G]
    if p.all_others:
        lse = p.lse(p.pair_den).unsqueeze(-1)  # [N, G, 1]
    else:
        lse_neg = p.lse(p.neg_den).unsqueeze(-1)  # [N, G, 1]
        has_neg = p.neg_den.any(-1, keepdim=True)
        lse = torch.where(has_neg, torch.logaddexp(p.sim, lse_neg), p.sim)  # [N, G, G]
    return -((p.sim - lse) * p.pos).sum(-1) / n_pos


def softnn(p: GroupPairs) -> torch.Tensor:
    """Soft nearest neighbour: positives and negatives make up every other rollout either way."""
    return -(p.lse(p.pos) - p.lse(p.pair_den))


register_contrastive_loss(
    ContrastiveLoss("infonce", infonce, 0.2, "one uniformly drawn positive (paper default)")
)
register_contrastive_loss(
    ContrastiveLoss("supcon", supcon, 0.2, "every positive, averaged (SupCon 'out')")
)
register_contrastive_loss(
    ContrastiveLoss("softnn", softnn, 1.0, "logsumexp over the positives (soft nearest neighbour)")
)
