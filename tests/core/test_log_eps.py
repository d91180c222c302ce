# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo.method.log_eps`: the authors' eps inside the log, against their formula written here.

Their loss (CLIPO 13c5fd6, `supcon_loss`): logits = cos / tau, M_i = max_j logits_ij over the
row (self included, so 1 / tau for cosine), then log(sum_{j != i} exp(logits_ij - M_i) + eps)
+ M_i as the denominator's log (and the same for SoftNN's positive sum). The reference below
is that formula on one group, in float64; the project's loss must equal it to 1e-12.
"""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core import CLIPOConfig, group_contrastive_loss

TAU = 0.02


def _authors_log(sum_shifted: torch.Tensor, m: float, eps: float) -> torch.Tensor:
    return torch.log(sum_shifted + eps) + m


def authors_losses(emb, correct, loss_type, eps, positive_index):
    """Per-anchor loss of their formula for one group (anchors: correct rollouts)."""
    e = torch.nn.functional.normalize(emb, dim=-1)
    logits = e @ e.T / TAU  # [G, G]
    g = len(correct)
    out = {}
    for i in range(g):
        if not correct[i]:
            continue
        m = float(logits[i].max())  # self included: 1 / tau
        others = [j for j in range(g) if j != i]
        pos = [j for j in others if correct[j]]
        den = _authors_log(sum(torch.exp(logits[i, j] - m) for j in others), m, eps)
        if loss_type == "supcon":
            out[i] = -sum(logits[i, p] - den for p in pos) / len(pos)
        elif loss_type == "softnn":
            num = _authors_log(sum(torch.exp(logits[i, p] - m) for p in pos), m, eps)
            out[i] = -(num - den)
        else:  # infonce: the positive the project drew
            out[i] = -(logits[i, positive_index[i]] - den)
    return out


@pytest.mark.parametrize("loss_type", ["infonce", "supcon", "softnn"])
@pytest.mark.parametrize("eps", [0.0, 1e-8])
def test_log_eps_is_the_authors_formula(loss_type, eps):
    torch.manual_seed(0)
    emb = torch.randn(6, 8, dtype=torch.float64)
    correct = torch.tensor([1, 1, 1, 0, 1, 0])
    cfg = CLIPOConfig(loss_type=loss_type, temperature=TAU, log_eps=eps)
    res = group_contrastive_loss(emb, correct, torch.zeros(6, dtype=torch.long), cfg)
    ref = authors_losses(emb, correct, loss_type, eps, res.positive_index.tolist())
    for i, want in ref.items():
        assert abs(float(res.per_sample_loss[i]) - float(want)) < 1e-12, (i, loss_type)


def test_the_phantom_sits_at_cosine_one_plus_tau_ln_eps():
    """eps * exp(M) with M = 1 / tau is exp(c / tau) at c = 1 + tau ln(eps): 0.63 at tau 0.02,
    0.08 at 0.05. A group whose other rollouts all sit below that cosine is dominated by it."""
    assert round(1 + 0.02 * math.log(1e-8), 2) == 0.63
    assert round(1 + 0.05 * math.log(1e-8), 2) == 0.08
    # anchor 0: its positive at cosine 0.5 (s = 25), its negative at cosine 0 (s = 0), M = 50
    emb = torch.tensor([[1.0, 0.0], [0.5, math.sqrt(0.75)], [0.0, 1.0]], dtype=torch.float64)
    correct = torch.tensor([1, 1, 0])
    gid = torch.zeros(3, dtype=torch.long)
    losses = []
    for eps in (0.0, 1e-8):
        cfg = CLIPOConfig(loss_type="supcon", temperature=TAU, log_eps=eps)
        losses.append(float(group_contrastive_loss(emb, correct, gid, cfg).per_sample_loss[0]))
    # without eps: log(e^25 + e^0) - 25 = log(1 + e^-25) ~ 1.4e-11
    assert abs(losses[0] - math.log1p(math.exp(-25))) < 1e-12
    # with eps: log(e^25 + 1 + 1e-8 e^50) - 25 ~ 50 + ln(1e-8) - 25 = 6.58: the phantom decides
    want = math.log(math.exp(25) + 1 + 1e-8 * math.exp(50)) - 25
    assert abs(losses[1] - want) < 1e-9 and round(losses[1], 2) == 6.58


def test_log_eps_out_of_range_is_one_line():
    with pytest.raises(ValueError, match=r"clipo\.method\.log_eps=-1e-08"):
        CLIPOConfig(log_eps=-1e-8)
