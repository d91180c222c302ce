# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL LossFunction protocol: ObjectiveLossFn (GMPO) shares add up over microbatches / DP shards;
the loss settings and the loss class come from the objective registry."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from clipo_megatron.core.objectives import OBJECTIVES, get_objective, policy_objective_loss
from clipo_megatron.nemo_rl import nemo_rl_available
from clipo_megatron.nemo_rl.loss_functions import (
    LossType,
    MetricNormalizer,
    ObjectiveLossFn,
    build_policy_loss,
    objective_settings,
    policy_loss_config,
)


def _protocol_ok(fn, *required_params):
    assert isinstance(fn.loss_type, LossType) and hasattr(fn, "input_type")
    assert all(isinstance(v, MetricNormalizer) for v in fn.metric_normalizations.values())
    params = inspect.signature(fn.__call__).parameters
    for p in ("data", "global_valid_seqs", "global_valid_toks", *required_params):
        assert p in params, p


def _pg_data(seed=0, b=6, s=9):
    gen = torch.Generator().manual_seed(seed)
    lp = -torch.rand(b, s, generator=gen, dtype=torch.float64)
    prev = lp + (torch.rand(b, s, generator=gen, dtype=torch.float64) - 0.5)
    ref = lp + (torch.rand(b, s, generator=gen, dtype=torch.float64) - 0.5) * 0.3
    gen_lp = prev + (torch.rand(b, s, generator=gen, dtype=torch.float64) - 0.5) * 0.2
    adv = torch.randn(b, generator=gen, dtype=torch.float64)
    token_mask = torch.zeros(b, s)
    for i in range(b):
        token_mask[i, 2 + i % 3 : s - i % 2] = 1  # prompt of 2-4 tokens, ragged ends
    sample_mask = torch.ones(b)
    sample_mask[4] = 0  # a filtered sample
    data = {
        "token_mask": token_mask,
        "sample_mask": sample_mask,
        "prev_logprobs": prev,
        "generation_logprobs": gen_lp,
        "reference_policy_logprobs": ref,
        "advantages": adv.unsqueeze(1).expand(b, s).clone(),
    }
    return lp, data, adv


def test_gmpo_protocol_matches_core_and_microbatches_add_up():
    lp, data, adv = _pg_data()
    fn = ObjectiveLossFn("gmpo", reference_policy_kl_penalty=0.01)
    _protocol_ok(fn, "next_token_logprobs")
    mask = (data["token_mask"] * data["sample_mask"].unsqueeze(1))[:, 1:]
    n_tok, n_seq = mask.sum(), data["sample_mask"].sum()  # NeMo-RL's global_valid_toks / _seqs
    full, m = fn(lp[:, 1:], data, n_seq, n_tok)
    ref, _ = policy_objective_loss(
        lp[:, 1:],
        data["prev_logprobs"][:, 1:],
        adv * (mask.sum(1) > 0),
        mask,
        objective="gmpo",
        ref_logprobs=data["reference_policy_logprobs"][:, 1:],
        kl_coef=0.01,
        num_seqs=float(n_seq),  # the filtered row (sample_mask 0) does not count
    )
    assert (
        abs(float(full) - float(ref)) < 1e-6 and m["num_valid_samples"] == 5
    )  # fp32 inside, as NeMo-RL
    parts = [
        fn(lp[sl, 1:], {k: v[sl] for k, v in data.items()}, n_seq, n_tok)[0]
        for sl in (slice(0, 2), slice(2, 5), slice(5, 6))
    ]
    assert abs(float(sum(parts)) - float(full)) < 1e-6
    # hand value: one sequence, log-ratios [0.5, -0.1] on its 2 response tokens, A = -1 (eps 0.4):
    # sgn = -1 -> max(0.5, 0.4) = 0.5, max(-0.1, -0.1) = -0.1 -> mean 0.2 -> loss = +exp(0.2) = 1.221403
    one = {
        "token_mask": torch.tensor([[0.0, 1, 1]]),
        "sample_mask": torch.ones(1),
        "prev_logprobs": torch.zeros(1, 3, dtype=torch.float64),
        "generation_logprobs": torch.tensor([[0.0, -0.2, 0.1]], dtype=torch.float64),
        "advantages": -torch.ones(1, 3),
    }
    loss, m1 = ObjectiveLossFn("gmpo")(
        torch.tensor([[0.5, -0.1]], dtype=torch.float64), one, torch.tensor(1.0), torch.tensor(2.0)
    )
    assert abs(float(loss) - math.exp(0.2)) < 1e-6
    # grpo_train reads these after every update (KeyError before): gen - prev = [-0.2, 0.1]
    # token_mult_prob_error = (e^0.2 + e^0.1) / 2; gen_kl (k3, r = prev - gen = [0.2, -0.1]):
    # ((e^0.2 - 0.2 - 1) + (e^-0.1 + 0.1 - 1)) / 2
    assert abs(m1["token_mult_prob_error"] - (math.exp(0.2) + math.exp(0.1)) / 2) < 1e-6
    kl = ((math.exp(0.2) - 1.2) + (math.exp(-0.1) - 0.9)) / 2
    assert abs(m1["gen_kl_error"] - kl) < 1e-6  # fp32 inside, as NeMo-RL


def test_gmpo_metrics_are_shares_that_add_up_per_sequence():
    """NeMo-RL sums a loss's metrics over microbatches and, with sequence packing, over the
    sequences its packing wrapper calls the loss on one by one: each metric must be a share of
    the global value, so the sum over any split equals the full-batch value (inflated before)."""
    lp, data, _ = _pg_data()
    fn = ObjectiveLossFn("gmpo")
    mask = (data["token_mask"] * data["sample_mask"].unsqueeze(1))[:, 1:]
    n_tok, n_seq = mask.sum(), (mask.sum(1) > 0).sum()
    _, full = fn(lp[:, 1:], data, n_seq, n_tok)
    per_seq = [
        fn(lp[i : i + 1, 1:], {k: v[i : i + 1] for k, v in data.items()}, n_seq, n_tok)[1]
        for i in range(lp.shape[0])
    ]
    for key in ("probs_ratio_clamped_frac", "approx_kl", "token_mult_prob_error", "gen_kl_error"):
        assert abs(sum(m[key] for m in per_seq) - full[key]) < 1e-6, key
    # the full-batch value is the plain token mean (computed here independently)
    d = (data["generation_logprobs"] - data["prev_logprobs"])[:, 1:]
    assert abs(full["token_mult_prob_error"] - float((d.abs().exp() * mask).sum() / n_tok)) < 1e-6


def test_policy_loss_config_and_builder_follow_the_registry():
    for name, objective in OBJECTIVES.items():
        cfg = policy_loss_config(name)
        # the translation both ways: registry -> loss_fn keys -> the same registry objective
        assert objective_settings(name, cfg) == objective
        assert (cfg["ratio_clip_min"], cfg["ratio_clip_max"]) == (
            objective.eps_low,
            objective.eps_high,
        )
    assert policy_loss_config("grpo")["reference_policy_kl_penalty"] == 0.001  # paper App.
    assert policy_loss_config("dapo")["ratio_clip_max"] == 0.28
    assert policy_loss_config("gspo")["sequence_level_importance_ratios"] is True
    # dual clip where the authors' verl applies it (vanilla PPO loss: grpo, dapo), not gspo / gmpo
    dual = [policy_loss_config(n)["ratio_clip_c"] for n in ("grpo", "dapo", "gspo", "gmpo")]
    assert dual == [3.0, 3.0, None, None]
    assert policy_loss_config("gmpo")["token_level_loss"] is False  # verl geo_mean: seq mean
    with pytest.raises(ValueError, match="not one of"):
        policy_loss_config("ppo")
    built = build_policy_loss("gmpo", policy_loss_config("gmpo"))
    assert isinstance(built, ObjectiveLossFn) and (built.eps_low, built.eps_high) == (0.4, 0.4)
    assert built.loss_type == LossType.SEQUENCE_LEVEL and built.kl_coef == 0.0
    # a key left out takes the objective's paper default; a key given wins
    assert ObjectiveLossFn("gmpo").eps_high == get_objective("gmpo").eps_high
    tok = ObjectiveLossFn("gmpo", ratio_clip_max=0.3, token_level_loss=True)
    assert tok.eps_high == 0.3 and tok.loss_type == LossType.TOKEN_LEVEL
    with pytest.raises(ValueError, match="> 0"):
        ObjectiveLossFn("gmpo", ratio_clip_min=0)
    # k3's own KL gradient: ClippedPGLossFn has no such form, so ObjectiveLossFn computes it
    k3 = build_policy_loss("grpo", {**policy_loss_config("grpo"), "kl_gradient": "k3"})
    assert isinstance(k3, ObjectiveLossFn) and k3.objective.kl_gradient == "k3"
    with pytest.raises(ValueError, match="loss_fn.use_importance_sampling_correction=True"):
        ObjectiveLossFn("grpo", use_importance_sampling_correction=True)
    with pytest.raises(ValueError, match="loss_fn: .*kl_gradient must be one of"):
        ObjectiveLossFn("grpo", kl_gradient="k2")
    with pytest.raises(ValueError, match="ratio_clip_c .* must be > 1"):
        ObjectiveLossFn("dapo", ratio_clip_c=0.5)
    if not nemo_rl_available():
        from clipo_megatron.nemo_rl import NemoRLMissingError

        with pytest.raises(NemoRLMissingError, match="not on PyPI"):
            build_policy_loss("dapo", policy_loss_config("dapo"))


def test_warmup_train_result_has_what_grpo_train_reads():
    """While CLIPO's warm-up holds the policy, `Policy.train` still returns the metrics grpo_train
    reads after every step (KeyError 'global_valid_toks' at step 1 before): measured by the loss
    function at ratio 1 on the batch, with NeMo-RL's global counts; loss and grad norm 0."""
    from clipo_megatron.nemo_rl.policy import warmup_train_result

    lp, data, _ = _pg_data()
    out = warmup_train_result(data, ObjectiveLossFn("gmpo"))
    m = out["all_mb_metrics"]
    mask = (data["token_mask"] * data["sample_mask"].unsqueeze(1))[:, 1:]
    assert m["global_valid_toks"] == [float(mask.sum())]  # 6 rows, one filtered
    assert m["global_valid_seqs"] == [5.0]
    d = (data["generation_logprobs"] - data["prev_logprobs"])[:, 1:]
    assert (
        abs(m["token_mult_prob_error"][0] - float((d.abs().exp() * mask).sum() / mask.sum())) < 1e-6
    )
    assert {"gen_kl_error", "probs_ratio_clamped_frac", "clipo_warmup"} <= set(m)
    assert m["loss"] == [0.0] and float(out["loss"]) == 0.0 and float(out["grad_norm"]) == 0.0


def _naive_clipped_pg(lp, data, cfg, kl_gradient="kl"):
    """NeMo-RL ClippedPGLossFn's loss (loss_functions.py / utils.calculate_kl @ 7ea279a, same in
    v0.7.0) re-written here for the settings the recipes use: k3 KL with the input clamp
    (+-20, importance weight frozen where it bites) and output clamp (10), PPO clip, dual clip,
    token- or sequence-level ratio and loss, masked means over (count + 1e-8)."""
    tm, sm = data["token_mask"][:, 1:], data["sample_mask"]
    adv, prev = data["advantages"][:, 1:], data["prev_logprobs"][:, 1:]
    mask = tm * sm.unsqueeze(-1)  # [B, T]

    def mm(v, m, dim=None, norm=None):
        return (v * m).sum(dim) / ((m.sum(dim) if norm is None else norm) + 1e-8)

    logr = data["reference_policy_logprobs"][:, 1:] - lp
    logr_c = logr.clamp(-20.0, 20.0)
    w = torch.exp(lp - lp.detach()) if kl_gradient == "kl" else torch.ones_like(lp)
    w = torch.where(logr == logr_c, w, w.detach())
    kl = cfg["reference_policy_kl_penalty"] * (w * (torch.exp(logr_c) - 1 - logr_c)).clamp(-10, 10)
    log_ratio = lp - prev
    if cfg["sequence_level_importance_ratios"]:
        ratios = mm(log_ratio, tm, dim=-1).exp().unsqueeze(-1).expand_as(lp)
    else:
        ratios = log_ratio.exp()
    clamped = ratios.clamp(1 - cfg["ratio_clip_min"], 1 + cfg["ratio_clip_max"])
    clip_loss = torch.max(-adv * ratios, -adv * clamped)
    if cfg["ratio_clip_c"] is not None:
        clip_loss = torch.where(
            adv < 0, torch.min(clip_loss, -adv * cfg["ratio_clip_c"]), clip_loss
        )
    if cfg["token_level_loss"]:
        return mm(clip_loss + kl, mask, norm=mask.sum())
    return mm(mm(clip_loss + kl, tm, dim=-1), sm, norm=sm.sum())


PARITY_CASES = [  # (objective, kl_gradient): every objective, and k3's own KL gradient
    ("grpo", "kl"),
    ("dapo", "kl"),
    ("gspo", "kl"),
    ("grpo", "k3"),
    ("gspo", "k3"),
]


@pytest.mark.parametrize("objective,kl_gradient", PARITY_CASES)
def test_runner_loss_matches_clipped_pg_formula(objective, kl_gradient):
    """Issue 17 (2, 4, 6): the runner's PolicyLoss = ClippedPGLossFn's formula (naive, above),
    loss and gradient, on a batch that fires the clips, the dual clip, both KL clamps and has a
    row without response tokens; with k3's gradient, the same against the formula with w = 1.
    The NeMo-RL driver's own loss (ClippedPGLossFn) is checked in test_against_nemo_rl.py."""
    from clipo_testkit.loss_parity import KL_COEF, parity_batch, runner_loss

    lp, data = parity_batch()
    cfg = {**policy_loss_config(objective), "reference_policy_kl_penalty": KL_COEF}
    naive = _naive_clipped_pg(lp, data, cfg, kl_gradient)
    (g_naive,) = torch.autograd.grad(naive, lp)
    loss, grad = runner_loss(objective, lp, data, kl_gradient=kl_gradient)
    assert abs(loss - float(naive)) < 1e-6, (loss, float(naive))
    torch.testing.assert_close(grad, g_naive, rtol=0, atol=1e-6)
    if kl_gradient == "k3":  # the NeMo-RL driver's ObjectiveLossFn (no NeMo-RL needed)
        from clipo_testkit.loss_parity import driver_loss

        d_loss, d_grad, cls = driver_loss(objective, lp, data, kl_gradient="k3")
        assert cls == "ObjectiveLossFn" and abs(d_loss - loss) < 1e-6
        torch.testing.assert_close(d_grad, grad, rtol=0, atol=1e-6)


def test_the_parity_batch_tells_the_settings_apart():
    """The batch above fires what the parity tests compare: dropping the dual clip, switching the
    KL gradient form or dropping the empty row from the sequence count moves loss or gradient
    by far more than their 1e-6 tolerance."""
    from clipo_testkit.loss_parity import KL_COEF, parity_batch, runner_loss

    lp, data = parity_batch()
    loss, grad = runner_loss("grpo", lp, data)
    assert abs(runner_loss("grpo", lp, data, ratio_clip_c=None)[0] - loss) > 1e-3
    assert (runner_loss("grpo", lp, data, kl_gradient="k3")[1] - grad).abs().max() > 1e-4
    cfg = {**policy_loss_config("gspo"), "reference_policy_kl_penalty": KL_COEF}
    naive = float(_naive_clipped_pg(lp, data, cfg))
    assert abs(naive * 6 / 5 - runner_loss("gspo", lp, data)[0]) > 1e-3  # 5 non-empty rows of 6
