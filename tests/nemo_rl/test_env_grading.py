# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The `clipo_math` environment's grading (issue 24, 3): N correct answers beside one hostile
one score N ones, the hostile one's status rides in its observation, and the advantage step
counts it into `verify/<status>` in both arms (before: the environment's own process pool
waited on the hostile answer with no deadline, and no metric showed a status)."""

import pytest
import torch

from clipo_megatron.nemo_rl.advantage_estimator import ClipoAdvantageEstimator, ClipoRunState
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.env_grading import (
    EnvSettings,
    batch_statuses,
    grade_messages,
    observation,
    status_of,
)
from clipo_megatron.nemo_rl.head_step import HeadStepResult
from clipo_megatron.verify.graders import STATUSES
from tests.nemo_rl.group_estimator import GroupNormalizedEstimator
from tests.nemo_rl.test_contract import contract_model, nemo_rl_cpu  # noqa: F401 (fixtures)

N = 5


def _log(prompt, answer):
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]


def test_observations_carry_the_status():
    assert observation(1.0, "ok") == "Environment: correct"  # NeMo-RL's math-env wording
    assert observation(0.0, "ok") == "Environment: incorrect"
    for s in STATUSES:
        assert status_of(observation(0.0, s)) == s
    assert status_of("Environment: incorrect (verifier timeout)") == "timeout"
    assert status_of("something else") is None
    logs = [[{"role": "environment", "content": observation(0.0, s)}] for s in STATUSES]
    assert batch_statuses(logs + [[{"role": "user", "content": "x"}]]) == list(STATUSES)


def test_env_settings_are_checked_in_one_line():
    assert EnvSettings.from_cfg({"num_workers": 2}) == EnvSettings(num_workers=2)
    for cfg, msg in [
        ({"num_workers": 0}, "env.clipo_math.num_workers=0"),
        ({"timeout": float("inf")}, "env.clipo_math.timeout=inf"),
        ({"max_answer_chars": -5}, "env.clipo_math.max_answer_chars=-5"),
        ({"tiemout": 3}, "env.clipo_math.tiemout: unknown key"),
    ]:
        with pytest.raises(ValueError, match=msg):
            EnvSettings.from_cfg(cfg)


def _estimator(enabled):
    def head_step(correct, group_ids, step):
        return HeadStepResult(rewards=torch.zeros(len(correct)), metrics={})

    logged = []
    est = ClipoAdvantageEstimator(
        GroupNormalizedEstimator(use_leave_one_out_baseline=False),
        head_step,
        ClipoNemoRLConfig.from_dict({"enabled": enabled}),
        ClipoRunState(),
        metrics_sink=lambda m, s: logged.append((s, m)),
    )
    return est, logged


@pytest.mark.runner
@pytest.mark.parametrize("enabled", [True, False])  # CLIPO and the GRPO baseline
def test_n_correct_beside_a_hostile_answer_counted_in_the_step_metrics(enabled):
    pytest.importorskip("math_verify")
    from clipo_megatron.verify.pool import VerifierPool
    from tests.verify import slow_graders

    logs = [_log("p", f"so \\boxed{{{i + 2}}}") for i in range(N)] + [_log("p", "deaf")]
    meta = [{"ground_truth": str(i + 2)} for i in range(N)] + [{"ground_truth": "1"}]
    with VerifierPool(2, timeout=1.0, slack=1.0, grader=slow_graders.deaf) as pool:
        rewards, obs = grade_messages(pool, logs, meta)
    assert rewards.tolist() == [1.0] * N + [0.0] and rewards.dtype == torch.float32
    assert [o["content"] for o in obs] == ["Environment: correct"] * N + [
        "Environment: incorrect (verifier timeout)"
    ]
    # NeMo-RL appends each observation to its message log; the advantage step reads them.
    batch = {"message_log": [log + [o] for log, o in zip(logs, obs)]}
    est, logged = _estimator(enabled)
    prompts = torch.tensor([[1, 2]] * (N + 1))
    est.compute_advantage(prompt_ids=prompts, rewards=rewards, mask=torch.ones(N + 1, 3),
                          repeated_batch=batch)  # fmt: skip
    ((step, metrics),) = logged
    assert step == 1
    assert {k: v for k, v in metrics.items() if k.startswith("verify/")} == {
        "verify/ok": float(N), "verify/timeout": 1.0, "verify/killed": 0.0,
        "verify/error": 0.0, "verify/too_long": 0.0,
    }  # fmt: skip


@pytest.mark.nemo_rl
@pytest.mark.slow
@pytest.mark.parametrize(
    "clipo_on",
    [  # the baseline's statuses come from the same environment: outside CI's set (CONTRIBUTING.md)
        pytest.param(True, id="clipo"),
        pytest.param(False, id="baseline", marks=pytest.mark.contract_full),
    ],
)
def test_grpo_train_logs_the_verifier_statuses(nemo_rl_cpu, contract_model, tmp_path, clipo_on):  # noqa: F811
    """NeMo-RL's real loop (scripts/test_nemo_rl.sh): the `clipo_math` actor grades through the
    pool, its observations reach the advantage step, and grpo_train's logger gets
    train/verify/<status>, one count per rollout, in both arms."""
    from clipo_testkit.nemo_rl.nemo_rl_loop import one_step_config, run_grpo, train_metrics

    cfg = one_step_config(clipo_on, model_dir=contract_model, out_dir=tmp_path)
    m = train_metrics(run_grpo(cfg, worker_fqn=nemo_rl_cpu), 1)
    counts = {s: m[f"verify/{s}"] for s in STATUSES}
    # grpo.num_prompts_per_step * generations per prompt: 16 short answers, all graded
    assert counts == {"ok": 16.0, "timeout": 0.0, "killed": 0.0, "error": 0.0, "too_long": 0.0}


def test_recipe_verifier_keys_checked_before_anything_starts():
    from pathlib import Path

    from clipo_megatron.nemo_rl.config import validate_master_config
    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    recipe = Path(__file__).resolve().parents[2] / "examples" / "configs" / "track1_qwen3b.yaml"
    validate_master_config(load_recipe(recipe, ["+env.clipo_math.timeout=5"]))
    with pytest.raises(ValueError, match="env.clipo_math.timeout=0"):
        validate_master_config(load_recipe(recipe, ["+env.clipo_math.timeout=0"]))
