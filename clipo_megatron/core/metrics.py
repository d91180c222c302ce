# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Scalar metrics users look at while CLIPO trains."""

from __future__ import annotations

import torch

from clipo_megatron.core.contrastive_loss import ContrastiveResult


def contrastive_metrics(
    result: ContrastiveResult, r_cl: torch.Tensor | None = None
) -> dict[str, float]:
    """valid-group fraction, mean loss, mean reward, positive-pair cosine, pos-neg gap, and the
    rows left out of the contrastive set (`clipo/empty_responses`: nothing pooled).

    Cosines are over pairs inside valid groups: positive = correct-correct,
    negative = correct-incorrect (the similarity, times tau, for `dot`).
    """
    st = result.stats
    n_anchor = max(result.num_anchors, 1)
    pos = float(st["pos_sim_sum"] / st["pos_pairs"]) if float(st["pos_pairs"]) > 0 else float("nan")
    neg = float(st["neg_sim_sum"] / st["neg_pairs"]) if float(st["neg_pairs"]) > 0 else float("nan")
    out = {
        "clipo/valid_group_frac": float(st["valid_groups"] / st["groups"].clamp_min(1)),
        "clipo/num_anchors": float(result.num_anchors),
        "clipo/loss": float(result.per_sample_loss.detach()[result.anchor_mask].sum()) / n_anchor,
        "clipo/pos_cos": pos,
        "clipo/neg_cos": neg,
        "clipo/pos_neg_gap": pos - neg,
        "clipo/empty_responses": float((~result.member).sum()),
    }
    if r_cl is not None:
        rewarded = result.reward_mask
        out["clipo/reward_mean_anchor"] = (
            float(r_cl[rewarded].mean()) if bool(rewarded.any()) else 0.0
        )
        out["clipo/reward_mean"] = float(r_cl.mean())
    return out
