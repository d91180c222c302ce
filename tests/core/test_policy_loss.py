# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Policy objectives (GRPO / DAPO / GSPO / GMPO) vs naive per-sequence loops and hand values (tol 1e-6)."""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core.objectives import policy_objective_loss


def _batch(seed=0, b=5, t=7):
    gen = torch.Generator().manual_seed(seed)
    lp = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 2
    old = lp + (torch.rand(b, t, generator=gen, dtype=torch.float64) - 0.5) * 0.8
    adv = torch.randn(b, generator=gen, dtype=torch.float64)
    mask = torch.rand(b, t, generator=gen) > 0.3
    mask[:, 0] = True
    ref = lp + (torch.rand(b, t, generator=gen, dtype=torch.float64) - 0.5) * 0.4
    return lp, old, adv, mask, ref


def _naive(lp, old, adv, mask, ref, objective, el, eh, agg, kl):
    seq_terms, tok_terms = [], []
    for i in range(lp.shape[0]):
        idx = [t for t in range(lp.shape[1]) if mask[i, t]]
        a = float(adv[i])
        if objective == "gmpo":
            s = 0.0
            for t in idx:
                lr = float(lp[i, t] - old[i, t])
                c = min(max(lr, -el), eh)
                s += min(lr, c) if a >= 0 else max(lr, c)
            terms = [-a * math.exp(s / len(idx))] * len(idx)
        else:
            if objective == "gspo":
                sr = math.exp(sum(float(lp[i, t] - old[i, t]) for t in idx) / len(idx))
                ratios = [sr] * len(idx)
            else:
                ratios = [math.exp(float(lp[i, t] - old[i, t])) for t in idx]
            terms = [-min(r * a, min(max(r, 1 - el), 1 + eh) * a) for r in ratios]
        if kl:
            terms = [
                x + kl * (math.exp(float(ref[i, t] - lp[i, t])) - float(ref[i, t] - lp[i, t]) - 1)
                for x, t in zip(terms, idx)
            ]
        seq_terms.append(sum(terms) / len(terms))
        tok_terms.extend(terms)
    return (
        sum(tok_terms) / len(tok_terms) if agg == "token-mean" else sum(seq_terms) / len(seq_terms)
    )


@pytest.mark.parametrize(
    "objective,el,eh,agg",
    [
        ("grpo", 0.2, 0.2, "token-mean"),
        ("dapo", 0.2, 0.28, "token-mean"),
        ("grpo", 0.2, 0.2, "seq-mean-token-mean"),
        ("gspo", 3e-4, 4e-4, "seq-mean-token-mean"),
        ("gspo", 0.05, 0.05, "seq-mean-token-mean"),
        ("gmpo", 0.4, 0.4, "seq-mean-token-mean"),
        ("gmpo", 0.1, 0.1, "seq-mean-token-mean"),
        ("gmpo", 0.4, 0.4, "token-mean"),
    ],
)
@pytest.mark.parametrize("kl", [0.0, 0.05])
def test_objectives_vs_naive_loop(objective, el, eh, agg, kl):
    lp, old, adv, mask, ref = _batch()
    loss, met = policy_objective_loss(
        lp,
        old,
        adv,
        mask,
        objective=objective,
        eps_low=el,
        eps_high=eh,
        aggregation=agg,
        ref_logprobs=ref,
        kl_coef=kl,
    )
    assert abs(float(loss) - _naive(lp, old, adv, mask, ref, objective, el, eh, agg, kl)) < 1e-6
    assert 0 <= met["pg/clip_frac"] <= 1 and met["pg/approx_kl"] >= 0 and met["pg/kl_ref"] >= 0


def test_defaults_per_objective_hand_computed():
    # one sequence, tokens log-ratios [0.5, -0.1], A = 1
    lp = torch.tensor([[0.5, -0.1]], dtype=torch.float64)
    old, adv, mask = (
        torch.zeros(1, 2, dtype=torch.float64),
        torch.tensor([1.0], dtype=torch.float64),
        torch.ones(1, 2),
    )
    # DAPO: ratios 1.648721 -> clip 1.28, 0.904837 -> -(1.28 + 0.904837)/2 = -1.0924187
    loss, _ = policy_objective_loss(lp, old, adv, mask, objective="dapo")
    assert abs(float(loss) + (1.28 + math.exp(-0.1)) / 2) < 1e-9
    # GSPO: s = exp(0.2) = 1.221403 -> clipped to 1 + 4e-4 -> loss -1.0004
    loss, met = policy_objective_loss(lp, old, adv, mask, objective="gspo")
    assert abs(float(loss) + 1.0004) < 1e-9 and met["pg/clip_frac"] == 1.0
    # GMPO (eps 0.4, A > 0, token-mean as in the paper): min(0.5, 0.4) = 0.4, -0.1 -> exp(0.15) = 1.161834
    loss, _ = policy_objective_loss(lp, old, adv, mask, objective="gmpo")
    assert abs(float(loss) + math.exp(0.15)) < 1e-9


def test_gspo_gradient_is_sequence_level():
    # d loss / d logp_t = -A * s / |y| for every token when unclipped (A = 1, s = exp(0.01))
    lp = torch.tensor([[0.02, 0.0]], dtype=torch.float64, requires_grad=True)
    loss, _ = policy_objective_loss(
        lp,
        torch.zeros(1, 2, dtype=torch.float64),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        objective="gspo",
        eps_low=1,
        eps_high=1,
    )
    loss.backward()
    torch.testing.assert_close(
        lp.grad, torch.full((1, 2), -math.exp(0.01) / 2, dtype=torch.float64)
    )


def test_global_normalisers_make_shards_sum():
    lp, old, adv, mask, _ = _batch(3, b=6)
    for obj in ("dapo", "gspo", "gmpo"):
        full, _ = policy_objective_loss(lp, old, adv, mask, objective=obj)
        kw = {"num_tokens": float(mask.sum()), "num_seqs": 6.0}
        parts = [
            policy_objective_loss(lp[s], old[s], adv[s], mask[s], objective=obj, **kw)[0]
            for s in (slice(0, 2), slice(2, 6))
        ]
        assert abs(float(sum(parts)) - float(full)) < 1e-12


def test_errors():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="is not one of"):
        policy_objective_loss(lp, lp, torch.zeros(2), lp, objective="ppo2")
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        policy_objective_loss(lp, lp, torch.zeros(2), lp, kl_coef=0.1)
    with pytest.raises(ValueError, match="aggregation must be"):
        policy_objective_loss(lp, lp, torch.zeros(2), lp, aggregation="sum")


def _verl_geo_mean(old_log_prob, log_prob, advantages, response_mask, clip_low, clip_high):
    """The authors' verl `compute_policy_loss_geo_mean` (Qwen-Applications/CLIPO 13c5fd6,
    verl/trainer/ppo/core_algos.py), re-written; its `loss_agg_mode` is ignored: the mean over
    rows. Its `+ 1e-8` in the per-row means is left out (a row without tokens gives 0 here too)."""
    neg_kl = log_prob - old_log_prob
    sgn = torch.sign(advantages)
    neg_kl_clamp = torch.clamp(neg_kl, -clip_low, clip_high)
    neg_kl_min = sgn * torch.min(sgn * neg_kl, sgn * neg_kl_clamp)
    n = response_mask.sum(dim=-1)
    safe = n.clamp_min(1)
    ratio = torch.exp((neg_kl_min * response_mask).sum(dim=-1) / safe)
    advantage = (advantages * response_mask).sum(dim=-1) / safe
    return torch.mean(-advantage * ratio)


def test_gmpo_is_verls_geo_mean():
    """Issue 17 (3): the runner's GMPO (PolicyLoss over two micro-batches, fp64) = verl's geo_mean
    to 1e-12, loss and gradient, on a batch with a row without response tokens (it counts)."""
    from clipo_testkit.loss_parity import parity_batch, runner_loss

    lp, data = parity_batch()
    mask = data["token_mask"][:, 1:]
    adv = data["advantages"][:, 1:]  # [B, T], verl's per-token advantages
    ref = _verl_geo_mean(data["prev_logprobs"][:, 1:], lp, adv, mask, 0.4, 0.4)
    (g_ref,) = torch.autograd.grad(ref, lp)
    loss, grad = runner_loss("gmpo", lp, data, kl_coef=0.0)
    assert abs(loss - float(ref.detach())) < 1e-12, (loss, float(ref.detach()))
    torch.testing.assert_close(grad, g_ref, rtol=0, atol=1e-12)
    tok, _ = runner_loss("gmpo", lp, data, kl_coef=0.0, aggregation="token-mean")
    assert abs(tok - loss) > 1e-3  # the named token-mean option is a different number


@pytest.mark.parametrize(
    "d, value, grad",
    [  # d = ref - logp; verl's low_var_kl: clamp(d, -20, 20), e^d - d - 1, clamp(-10, 10)
        (1.0, math.e - 2, 1 - math.e),  # d/dlogp (e^d - d - 1) = 1 - e^d
        (-1.0, math.exp(-1), 1 - math.exp(-1)),
        (0.0, 0.0, 0.0),
        (3.0, 10.0, 0.0),  # e^3 - 4 = 16.1: the output clamp holds it at 10, no gradient
        (25.0, 10.0, 0.0),  # the input clamp (20), then the output clamp
        (-25.0, 10.0, 0.0),  # e^-20 + 20 - 1 = 19: both clamps, no gradient
    ],
)
def test_k3_gradient_is_verls_low_var_kl(d, value, grad):
    """`kl_gradient: k3` (the reproduction recipes') is verl's `low_var_kl` term, value and
    gradient, its clamps included; the default `kl` has gradient logp - ref instead."""
    from clipo_megatron.core.objective_kernels import kl_terms

    logp = torch.tensor([[-2.0]], dtype=torch.float64, requires_grad=True)
    ref = logp.detach() + d
    kl = kl_terms(logp, ref, torch.ones(1, 1, dtype=torch.float64), "k3")
    (g,) = torch.autograd.grad(kl.sum(), logp)
    assert float(kl) == pytest.approx(value, abs=1e-12)
    assert float(g) == pytest.approx(grad, abs=1e-12)
    if d == 1.0:  # the other form: gradient -d (= logp - ref), same value
        kl_form = kl_terms(logp, ref, torch.ones(1, 1, dtype=torch.float64), "kl")
        (g_kl,) = torch.autograd.grad(kl_form.sum(), logp)
        assert float(kl_form) == pytest.approx(value) and float(g_kl) == pytest.approx(-d)


def test_verls_micro_batch_token_mean_weights_a_token_by_mean_length_ratio():
    """docs/reproduce.md's expected size of the token-mean difference: verl (dynamic batch size)
    takes each micro-batch's token mean scaled by its rows / the mini-batch's rows; relative to
    the global token mean (NeMo-RL), a token of micro-batch m then weighs L / L_m (L: the
    mini-batch's mean response length, L_m: the micro-batch's). Both sides use this project's
    token-mean loss; verl's composition is its dp_actor scaling."""
    b, t = 5, 8
    lengths = torch.tensor([2, 3, 8, 7, 6])  # micro-batches: rows 0-1 (short), rows 2-4 (long)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).double()
    lp = torch.full((b, t), -1.0, dtype=torch.float64, requires_grad=True)
    adv = torch.linspace(-1.0, 1.0, b, dtype=torch.float64)
    kw = {"objective": "grpo", "kl_coef": 0.0}
    (g_global,) = torch.autograd.grad(
        policy_objective_loss(lp, lp.detach(), adv, mask, **kw)[0], lp
    )
    verl = sum(
        policy_objective_loss(lp[s], lp.detach()[s], adv[s], mask[s], **kw)[0] * (len(rows) / b)
        for rows, s in ((range(0, 2), slice(0, 2)), (range(2, 5), slice(2, 5)))
    )
    (g_verl,) = torch.autograd.grad(verl, lp)
    mean_len = float(lengths.sum()) / b  # 26 / 5
    ratio = torch.ones(b, t, dtype=torch.float64)
    ratio[:2] = mean_len / 2.5  # L_m = (2 + 3) / 2
    ratio[2:] = mean_len / 7.0  # L_m = (8 + 7 + 6) / 3
    on = mask.bool()
    torch.testing.assert_close(g_verl[on], (ratio * g_global)[on], rtol=1e-12, atol=0)
