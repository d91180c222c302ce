# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Cross-checks against the real NeMo-RL classes (CPU). Skipped without NeMo-RL.

Run: `NEMO_RL_SRC=<NeMo-RL checkout> bash scripts/test_nemo_rl.sh` (docs/nemo_rl.md).
"""

from __future__ import annotations

import pytest
import torch

from clipo_megatron.core.objectives import OBJECTIVES, policy_objective_loss
from clipo_megatron.nemo_rl.loss_functions import ObjectiveLossFn, policy_loss_config
from tests.nemo_rl.group_estimator import GroupNormalizedEstimator

pytestmark = pytest.mark.nemo_rl
nemo_rl = pytest.importorskip(
    "nemo_rl", reason="NeMo-RL not installed: see docs/nemo_rl.md (Install)"
)


def _data(seed=0, b=6, s=9):
    gen = torch.Generator().manual_seed(seed)
    lp = -torch.rand(b, s, generator=gen)
    prev = lp + (torch.rand(b, s, generator=gen) - 0.5) * 0.6
    ref = lp + (torch.rand(b, s, generator=gen) - 0.5) * 0.3
    adv = torch.randn(b, generator=gen)
    tm = torch.zeros(b, s)
    for i in range(b):
        tm[i, 2 + i % 3 : s - i % 2] = 1
    data = {
        "token_mask": tm,
        "sample_mask": torch.ones(b),
        "prev_logprobs": prev,
        "generation_logprobs": prev,
        "reference_policy_logprobs": ref,
        "advantages": adv.unsqueeze(1).expand(b, s).clone(),
        "input_ids": torch.zeros(b, s, dtype=torch.long),
    }
    return lp, data, adv


@pytest.mark.parametrize("objective", [n for n, o in OBJECTIVES.items() if o.in_nemo_rl])
def test_clipped_pg_matches_core_objective(objective):
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    cfg = policy_loss_config(objective)
    fn = ClippedPGLossFn(ClippedPGLossConfig(**cfg))
    lp, data, adv = _data()
    mask = data["token_mask"][:, 1:]
    loss, _ = fn(
        lp[:, 1:],
        BatchedDataDict(data),
        global_valid_seqs=torch.tensor(6.0),
        global_valid_toks=mask.sum(),
    )
    ours, _ = policy_objective_loss(
        lp[:, 1:],
        data["prev_logprobs"][:, 1:],
        adv,
        mask,
        objective=objective,
        ref_logprobs=data["reference_policy_logprobs"][:, 1:],
        kl_coef=cfg["reference_policy_kl_penalty"],
    )
    assert abs(float(loss) - float(ours)) < 1e-5, (float(loss), float(ours))


@pytest.mark.parametrize(
    "objective,keys",
    [("grpo", {}), ("dapo", {}), ("gspo", {}), ("gmpo", {}), ("grpo", {"kl_gradient": "k3"})],
)
def test_both_drivers_compute_the_same_policy_update(objective, keys):
    """Issue 17 (2, 3, 4, 6): the runner's PolicyLoss and what the NeMo-RL driver builds
    (NeMo-RL's own ClippedPGLossFn for grpo / dapo / gspo) agree in loss and gradient to 1e-6 on a
    batch with a KL term, clipped and dual-clipped ratios, both KL clamps and an empty row."""
    from clipo_testkit.loss_parity import driver_loss, parity_batch, runner_loss

    lp, data = parity_batch()
    theirs, g_theirs, cls = driver_loss(objective, lp, data, **keys)
    ours, g_ours = runner_loss(objective, lp, data, **keys)
    k3 = keys.get("kl_gradient") == "k3"
    assert cls == ("ObjectiveLossFn" if objective == "gmpo" or k3 else "ClippedPGLossFn")
    assert abs(ours - theirs) < 1e-6, (ours, theirs)
    torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-6)
    if k3:  # k3's own gradient is not ClippedPGLossFn's: the batch tells them apart
        g_clipped = driver_loss(objective, lp, data)[1]
        assert (g_clipped - g_ours).abs().max() > 1e-4


@pytest.mark.parametrize("loo", [False, True])
def test_group_estimator_matches_nemo_rl(loo):
    from nemo_rl.algorithms import advantage_estimator as ae

    # main: a pydantic AdvEstimatorConfig; v0.7.0: a plain dict with the same keys
    make_cfg = getattr(ae, "AdvEstimatorConfig", dict)

    gen = torch.Generator().manual_seed(2)
    prompts = torch.randint(0, 4, (40, 1), generator=gen).expand(40, 3).clone()
    rewards = (
        torch.randint(0, 2, (40,), generator=gen).float() + torch.rand(40, generator=gen) * 0.3
    )
    mask = torch.ones(40, 5)
    cfg = make_cfg(use_leave_one_out_baseline=loo, normalize_rewards=True)
    theirs = ae.GRPOAdvantageEstimator(cfg, None).compute_advantage(
        prompt_ids=prompts, rewards=rewards.clone(), mask=mask
    )
    ours = GroupNormalizedEstimator(use_leave_one_out_baseline=loo).compute_advantage(
        prompts, rewards, mask
    )
    torch.testing.assert_close(ours, theirs.float(), rtol=1e-5, atol=1e-5)


def test_enums_are_nemo_rls():
    from nemo_rl.algorithms.loss.interfaces import LossType

    assert isinstance(ObjectiveLossFn("gmpo").loss_type, LossType)


def test_gmpo_speaks_nemo_rls_enums_and_metrics():
    """NeMo-RL dispatches on `loss_fn.input_type == LossInputType.LOGPROB` (prepare_loss_input):
    our loss must carry NeMo-RL's own enum members (v0.7.0 has no MetricNormalizer; a fallback
    that mirrored all three enums made the dispatch raise "Unknown loss function input type"),
    and report the metrics grpo_train reads with ClippedPGLossFn's values at equal inputs."""
    from nemo_rl.algorithms.loss.interfaces import LossInputType, LossType
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn

    gmpo = ObjectiveLossFn("gmpo")
    assert gmpo.input_type is LossInputType.LOGPROB and gmpo.loss_type is LossType.SEQUENCE_LEVEL
    lp, data = _data()[:2]
    data = dict(data)
    data["generation_logprobs"] = data["prev_logprobs"] + 0.05 * torch.sin(
        torch.arange(data["prev_logprobs"].numel()).view_as(data["prev_logprobs"]).float()
    )
    mask = (data["token_mask"] * data["sample_mask"].unsqueeze(1))[:, 1:]
    n_tok, n_seq = mask.sum(), (mask.sum(1) > 0).sum().float()
    theirs = ClippedPGLossFn(ClippedPGLossConfig(**policy_loss_config("grpo")))
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    _, m_theirs = theirs(lp[:, 1:], BatchedDataDict(data), n_seq, n_tok)
    _, m_ours = gmpo(lp[:, 1:], data, n_seq, n_tok)
    for key in ("token_mult_prob_error", "gen_kl_error"):
        assert abs(m_ours[key] - m_theirs[key]) < 1e-6, key


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_one_sequence_at_a_time_sums_to_the_batch_loss(objective):
    """NeMo-RL's `SequencePackingLossWrapper` (the packed path of its Megatron worker's `train`)
    calls the loss once per sequence with the global counts and sums the losses and the metrics.
    Our objectives must give the batch call's loss that way (GMPO: a sequence-level mean)."""
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    lp, data, _ = _data(seed=3)
    if OBJECTIVES[objective].in_nemo_rl:
        fn = ClippedPGLossFn(ClippedPGLossConfig(**policy_loss_config(objective)))
    else:
        fn = ObjectiveLossFn(objective)
    mask = (data["token_mask"] * data["sample_mask"].unsqueeze(1))[:, 1:]
    n_tok, n_seq = mask.sum(), (mask.sum(1) > 0).sum().float()
    whole, _ = fn(lp[:, 1:], BatchedDataDict(data), n_seq, n_tok)
    parts = 0.0
    for i in range(lp.shape[0]):
        one = BatchedDataDict({k: v[i : i + 1] for k, v in data.items()})
        loss, _ = fn(lp[i : i + 1, 1:], one, n_seq, n_tok)
        parts = parts + loss
    assert abs(float(parts) - float(whole)) <= 1e-6 * max(1.0, abs(float(whole))), (parts, whole)
