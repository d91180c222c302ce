# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL LossFunction protocol: head loss and GMPO shares add up over microbatches / DP shards."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from clipo_megatron.core.config import CLIPOConfig
from clipo_megatron.core.losses import group_contrastive_loss, l2_normalize
from clipo_megatron.core.objectives import policy_objective_loss
from clipo_megatron.nemo_rl import nemo_rl_available
from clipo_megatron.nemo_rl.losses import (
    ContrastiveHeadLossFn,
    GMPOLossFn,
    LossType,
    MetricNormalizer,
    build_policy_loss,
    policy_loss_config,
)


def _protocol_ok(fn, *required_params):
    assert isinstance(fn.loss_type, LossType) and hasattr(fn, "input_type")
    assert all(isinstance(v, MetricNormalizer) for v in fn.metric_normalizations.values())
    params = inspect.signature(fn.__call__).parameters
    for p in ("data", "global_valid_seqs", "global_valid_toks", *required_params):
        assert p in params, p


def _head_batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    groups = torch.tensor([0, 1, 0, 2, 1, 0, 2, 1, 0, 2, 2])
    correct = torch.tensor([1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0])
    emb = l2_normalize(torch.randn(11, 8, generator=gen, dtype=torch.float64)).requires_grad_(True)
    return emb, {
        "clipo_correct": correct,
        "clipo_group_ids": groups,
        "clipo_sample_ids": torch.arange(11),
    }


def test_head_loss_protocol_and_dp_shares_add_up():
    cfg = CLIPOConfig()
    fn = ContrastiveHeadLossFn(cfg)
    _protocol_ok(fn, "embeddings")
    assert fn.loss_type == LossType.SEQUENCE_LEVEL
    emb, data = _head_batch()
    n_anchor = ContrastiveHeadLossFn.count_anchors(data, cfg)
    full, m = fn(emb, data, n_anchor, None, step=3)
    ref = group_contrastive_loss(
        emb,
        data["clipo_correct"],
        data["clipo_group_ids"],
        cfg,
        step=3,
        sample_ids=data["clipo_sample_ids"],
    )
    assert (
        abs(float(full.detach()) - float(ref.loss.detach())) < 1e-12
        and m["clipo_num_anchors"] == ref.num_anchors == 7
    )
    g_full = torch.autograd.grad(full, emb)[0]
    # two DP shards (rows interleaved), each with the gathered embeddings and its own local mask
    total, g_sum = 0.0, torch.zeros_like(emb)
    for rows in (torch.tensor([0, 3, 4, 8, 9]), torch.tensor([1, 2, 5, 6, 7, 10])):
        local = torch.zeros(11, dtype=torch.bool)
        local[rows] = True
        part, _ = fn(emb, {**data, "clipo_local_mask": local}, n_anchor, None, step=3)
        total += float(part)
        g_sum += torch.autograd.grad(part, emb)[0]
    assert abs(total - float(full)) < 1e-12
    torch.testing.assert_close(g_sum, g_full, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"\[B, d\]"):
        fn(emb[:5], data, n_anchor, None)


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
    fn = GMPOLossFn(reference_policy_kl_penalty=0.01)
    _protocol_ok(fn, "next_token_logprobs")
    mask = (data["token_mask"] * data["sample_mask"].unsqueeze(1))[:, 1:]
    n_tok, n_seq = mask.sum(), (mask.sum(1) > 0).sum()
    full, m = fn(lp[:, 1:], data, n_seq, n_tok)
    ref, _ = policy_objective_loss(
        lp[:, 1:],
        data["prev_logprobs"][:, 1:],
        adv * (mask.sum(1) > 0),
        mask,
        objective="gmpo",
        ref_logprobs=data["reference_policy_logprobs"][:, 1:],
        kl_coef=0.01,
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
    loss, m1 = GMPOLossFn()(
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
    fn = GMPOLossFn()
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


def test_policy_loss_config_and_builder():
    assert policy_loss_config("grpo")["reference_policy_kl_penalty"] == 0.001
    assert policy_loss_config("dapo")["ratio_clip_max"] == 0.28
    with pytest.raises(ValueError, match="not one of"):
        policy_loss_config("ppo")
    assert isinstance(build_policy_loss("gmpo", policy_loss_config("gmpo")), GMPOLossFn)
    with pytest.raises(ValueError, match="> 0"):
        GMPOLossFn(ratio_clip_min=0)
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
    out = warmup_train_result(data, GMPOLossFn())
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
