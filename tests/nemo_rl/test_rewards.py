# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Reward integration: exact r' and advantages on hand-made batches (ragged groups, DAPO filtering,
DP sharding order), row assembly from workers, warm-up bookkeeping."""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core.advantages import dynamic_sampling_filter
from clipo_megatron.nemo_rl.advantage_estimator import (
    ClipoAdvantageEstimator,
    ClipoRunState,
    group_ids_from_prompts,
)
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.head_step import HeadStepResult, WorkersHeadStep, assemble_rows
from clipo_megatron.nemo_rl.worker import ClipoWorkerMixin
from tests.nemo_rl.group_estimator import GroupNormalizedEstimator

# Rows in train_data order; prompts A = [5, 6, 0], B = [7, 0, 0], C = [5, 6, 1] (right-padded).
PROMPTS = torch.tensor(
    [[5, 6, 0], [7, 0, 0], [5, 6, 0], [5, 6, 1], [5, 6, 0], [7, 0, 0], [5, 6, 0]]
)
REWARDS = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
# A head step's contrastive rewards: anchors = correct rows of the valid group A (rows 0, 2, 6).
R_CL = torch.tensor([-0.3, 0.0, -0.1, 0.0, 0.0, 0.0, -0.5])


def _estimator(r_cl=R_CL, *, loo=False, enabled=True, warmup=0):
    calls = []

    def head_step(correct, group_ids, step):
        calls.append((correct.clone(), group_ids.clone(), step))
        return HeadStepResult(rewards=r_cl[: len(correct)].clone(), metrics={"clipo/loss": 1.5})

    cfg = ClipoNemoRLConfig.from_dict({"enabled": enabled, "method": {"warmup_steps": warmup}})
    state = ClipoRunState()
    logged = []
    est = ClipoAdvantageEstimator(
        GroupNormalizedEstimator(use_leave_one_out_baseline=loo),
        head_step,
        cfg,
        state,
        metrics_sink=lambda m, s: logged.append((s, m)),
    )
    return est, calls, state, logged


def test_group_ids_from_prompts():
    g = group_ids_from_prompts(PROMPTS)
    # unique rows sorted: [5,6,0] -> 0, [5,6,1] -> 1, [7,0,0] -> 2
    assert g.tolist() == [0, 2, 0, 1, 0, 2, 0]
    assert group_ids_from_prompts(torch.tensor([9, 3, 9])).tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match=r"\[B, S\]"):
        group_ids_from_prompts(torch.zeros(2, 2, 2))


def test_exact_shaped_rewards_and_advantages_ragged():
    est, calls, state, logged = _estimator()
    mask = torch.ones(7, 4)
    adv = est.compute_advantage(prompt_ids=PROMPTS, rewards=REWARDS, mask=mask)
    correct, groups, step = calls[0]
    assert correct.tolist() == [True, False, True, True, False, True, True] and step == 0
    assert groups.tolist() == [0, 2, 0, 1, 0, 2, 0]
    # r' = r + r_CL = [0.7, 0, 0.9, 1, 0, 1, 0.5]
    # group A (rows 0, 2, 4, 6): r' = [0.7, 0.9, 0, 0.5], mean 0.525,
    #   deviations [0.175, 0.375, -0.525, -0.025], squares sum 0.4475, unbiased std sqrt(0.4475/3) = 0.386221
    # group B (rows 1, 5): r' = [0, 1], mean 0.5, std sqrt(0.5) = 0.707107 -> A = -/+ 0.5 / 0.707108
    # group C (row 3): alone -> A = 0
    sa, sb = math.sqrt(0.4475 / 3) + 1e-6, math.sqrt(0.5) + 1e-6
    exp = torch.tensor([0.175 / sa, -0.5 / sb, 0.375 / sa, 0.0, -0.525 / sa, 0.5 / sb, -0.025 / sa])
    assert adv.shape == (7, 4)
    torch.testing.assert_close(adv[:, 0], exp, rtol=0, atol=1e-6)
    assert torch.equal(adv, adv[:, :1].expand(7, 4))
    assert state.step == 1 and logged[0][0] == 1 and logged[0][1]["clipo/loss"] == 1.5
    assert abs(logged[0][1]["clipo/reward_shaped_mean"] - (0.7 + 0.9 + 1 + 1 + 0.5) / 7) < 1e-7


def test_update_diagnostics_are_logged():
    """The estimator logs whether CLIPO changed the update, from NeMo-RL's estimator run on r and
    on r' (core/diagnostics.py), with a token mask as NeMo-RL passes it (prompt / padding 0)."""
    est, _, _, logged = _estimator()
    mask = torch.tensor([[0, 1, 1, 0]] * 7)  # prompt / padding columns are 0
    est.compute_advantage(prompt_ids=PROMPTS, rewards=REWARDS, mask=mask)
    m = logged[0][1]
    # Valid groups: only A (rows 0, 2, 4, 6: 3 correct, 1 wrong); B has one correct, C one row.
    # spread: r_CL of A's correct rows [-.3, -.1, -.5]: mean -.3, unbiased std sqrt(.08 / 2) = .2
    assert m["clipo/r_cl_spread"] == pytest.approx(0.2, abs=1e-7)
    # A(r) in A: r = [1, 1, 0, 1], mean .75, std .5 -> [.25, .25, -.75, .25] / s0;
    # A(r') in A: [.175, .375, -.525, -.025] / sa (test above); B and C: A(r') = A(r)
    # (B's r_CL are 0; |A| = .5 / sb on both rows), C alone: 0.
    s0, sa, sb = 0.5 + 1e-6, math.sqrt(0.4475 / 3) + 1e-6, math.sqrt(0.5) + 1e-6
    a0, a1 = [0.25, 0.25, -0.75, 0.25], [0.175, 0.375, -0.525, -0.025]
    num = sum(abs(y / sa - x / s0) for x, y in zip(a0, a1))
    assert m["clipo/adv_share"] == pytest.approx(num / (1.5 / s0 + 1.0 / sb), rel=1e-5)
    assert m["clipo/ranked_frac"] == 1.0  # A's correct rows: .175, .375, -.025 over sa
    assert "clipo/r_cl_within_group_spread" not in m  # replaced by clipo/r_cl_spread
    # equal r_CL among A's correct rows: r' two-valued in A, GRPO's advantages, nothing changes
    tied, _, _, logged = _estimator(torch.tensor([-0.3, 0.0, -0.3, 0.0, 0.0, 0.0, -0.3]))
    tied.compute_advantage(prompt_ids=PROMPTS, rewards=REWARDS, mask=mask)
    m = logged[0][1]
    assert (m["clipo/r_cl_spread"], m["clipo/ranked_frac"]) == (0.0, 0.0)
    assert m["clipo/adv_share"] == pytest.approx(0.0, abs=1e-5)  # only the std's 1e-6 differs


def test_leave_one_out_variant_and_disabled():
    est, _, _, _ = _estimator(loo=True)
    adv = est.compute_advantage(prompt_ids=PROMPTS, rewards=REWARDS, mask=torch.ones(7, 1))[:, 0]
    # group B, leave-one-out: baselines are the other reward (1, 0), others' std is 0 -> A = r' - b = [-1, 1]
    assert adv[[1, 5]].tolist() == [-1.0, 1.0]
    # group A row 4 (r' = 0): baseline (0.7 + 0.9 + 0.5)/3 = 0.7, others' std = std([0.7, 0.9, 0.5]) = 0.2
    assert abs(float(adv[4]) - (-0.7 / (0.2 + 1e-6))) < 1e-5
    off, calls, state, _ = _estimator(enabled=False, warmup=3)
    plain = off.compute_advantage(prompt_ids=PROMPTS, rewards=REWARDS, mask=torch.ones(7, 1))
    # no head step; the step still counts, and the baseline has no warm-up
    assert not calls and state.step == 1 and off.cfg.policy_updates_at(state.trained_step)
    ref = GroupNormalizedEstimator(use_leave_one_out_baseline=False).compute_advantage(
        PROMPTS, REWARDS, torch.ones(7, 1)
    )
    assert torch.equal(plain, ref)


def test_dynamic_sampling_filtered_batch():
    # DAPO: NeMo-RL drops groups with equal rewards *before* the logprob pass; the estimator then sees only
    # the kept rows (C, alone, is dropped; A and B kept), and r' / advantages equal the unfiltered ones there.
    ds = dynamic_sampling_filter(REWARDS, group_ids_from_prompts(PROMPTS))
    assert (
        ds.keep.tolist() == [True, True, True, False, True, True, True]
        and ds.num_dropped_groups == 1
    )
    keep = ds.keep
    est_f, calls, _, _ = _estimator(R_CL[keep])
    adv_f = est_f.compute_advantage(
        prompt_ids=PROMPTS[keep], rewards=REWARDS[keep], mask=torch.ones(6, 1)
    )
    est, _, _, _ = _estimator()
    adv = est.compute_advantage(prompt_ids=PROMPTS, rewards=REWARDS, mask=torch.ones(7, 1))
    torch.testing.assert_close(adv_f[:, 0], adv[keep, 0], rtol=0, atol=0)
    assert calls[0][0].numel() == 6


def test_unshaped_reward_picks_positives():
    est, calls, _, _ = _estimator()
    shaped = (
        REWARDS * 0.5 + 0.25
    )  # e.g. NeMo-RL reward scaling: positives must come from the raw reward
    est.compute_advantage(
        prompt_ids=PROMPTS,
        rewards=shaped,
        mask=torch.ones(7, 1),
        repeated_batch={"unshaped_total_reward": REWARDS},
    )
    assert calls[0][0].tolist() == (REWARDS >= 0.5).tolist()
    assert est.cfg.is_correct(torch.tensor([0.49, 0.5, 1.0])).tolist() == [False, True, True]


def test_assemble_rows_dp_sharding_order_and_replicas():
    # 2 DP ranks after NeMo-RL's length sort: rank 0 holds rows [5, 0, 3], rank 1 [6, 2, 1, 4];
    # TP replicas of rank 1 report the same rows again.
    vals = torch.arange(7, dtype=torch.float32) / 10
    p0 = (torch.tensor([5, 0, 3]), vals[[5, 0, 3]])
    p1 = (torch.tensor([6, 2, 1, 4]), vals[[6, 2, 1, 4]])
    out = assemble_rows([p1, p0, p1, (torch.zeros(0, dtype=torch.long), torch.zeros(0))], 7)
    assert torch.equal(out, vals)
    with pytest.raises(ValueError, match=r"rows \[4\] missing"):
        assemble_rows([p0, (torch.tensor([6, 2, 1]), vals[[6, 2, 1]])], 7)
    with pytest.raises(ValueError, match="disagree"):
        assemble_rows([p0, p1, (torch.tensor([6]), torch.tensor([9.0]))], 7)
    with pytest.raises(ValueError, match="outside"):
        assemble_rows([(torch.tensor([7]), torch.tensor([0.0]))], 7)


def test_the_workers_head_step_asks_every_worker_and_returns_r_cl_in_batch_order():
    """`WorkersHeadStep`: one call on every worker, by the worker method's name with keyword
    arguments (NeMo-RL's worker group takes no others); the last stages' rows back in batch
    order, a stage without the head contributing none, the head's metrics passed on."""
    calls = []

    def run_all_workers(method, **kwargs):
        calls.append((method, kwargs))
        return [
            {"sample_idx": torch.tensor([2, 0]), "rewards": torch.tensor([-0.2, 0.0]),
             "metrics": {"clipo/loss": 1.5}},
            {"sample_idx": torch.zeros(0, dtype=torch.long), "rewards": torch.zeros(0),
             "metrics": {}},
            {"sample_idx": torch.tensor([1]), "rewards": torch.tensor([-0.1]),
             "metrics": {"clipo/loss": 1.5}},
        ]  # fmt: skip

    correct, groups = torch.tensor([True, False, True]), torch.tensor([0, 0, 0])
    out = WorkersHeadStep(run_all_workers)(correct, groups, 4)
    [(method, kwargs)] = calls
    assert method == "clipo_head_step" and getattr(ClipoWorkerMixin, method)
    assert kwargs == {"correct": correct, "group_ids": groups, "step": 4}
    assert out.rewards.tolist() == pytest.approx([0.0, -0.1, -0.2])
    assert out.metrics == {"clipo/loss": 1.5}


@pytest.mark.parametrize("warmup", [0, 1, 2, 5])
def test_head_only_steps_equal_warmup_steps(warmup):
    """grpo_train computes advantages once per step, then calls policy.train: the policy is
    held for exactly `warmup_steps` steps, and the logged flag agrees with the held ones."""
    est, _, state, logged = _estimator(warmup=warmup)
    cfg = est.cfg
    held = []
    for total_steps in range(warmup + 3):  # grpo_train's 0-based step counter
        assert state.step == total_steps
        est.compute_advantage(prompt_ids=PROMPTS, rewards=REWARDS, mask=torch.ones(7, 1))
        held.append(not cfg.policy_updates_at(state.trained_step))  # what ClipoPolicy.train asks
    assert sum(held) == warmup and held == [True] * warmup + [False] * 3
    assert [m["clipo/policy_updated"] for _, m in logged] == [float(not h) for h in held]
    assert [s for s, _ in logged] == list(range(1, warmup + 4))  # grpo_train logs total_steps + 1
    s2 = ClipoRunState()
    s2.load_state_dict(state.state_dict())
    assert s2.step == warmup + 3
    with pytest.raises(RuntimeError, match="before any advantage"):
        _ = ClipoRunState().trained_step


def test_shape_mismatch_is_named():
    est, _, _, _ = _estimator(R_CL[:5])
    with pytest.raises(ValueError, match="contrastive rewards shape"):
        est.compute_advantage(prompt_ids=PROMPTS, rewards=REWARDS, mask=torch.ones(7, 1))
