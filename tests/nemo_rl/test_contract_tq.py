# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO in NeMo-RL's real `grpo_train_sync` on CPU: the TransferQueue data plane.

The recipe of `test_contract` with `data_plane.enabled` (TransferQueue's `simple` backend, as the
`*-tq_simple` recipes), run through the driver, which picks the loop as NeMo-RL's run_grpo.py
does and builds CLIPO's policy over NeMo-RL's `TQPolicy`. TransferQueue's controller and storage
unit, NeMo-RL's `SyncRolloutActor` and its `TQWorkerMixin` fetches all run; the rows reach the
workers through TransferQueue and only `KVBatchMeta` crosses the driver. 3 steps with one
warm-up step (the policy is held through `train_from_meta`), the four CLIPO checks on every
step, a checkpoint at step 2 and a resume that must give step 3 exactly.
"""

from __future__ import annotations

import shutil

import pytest

from clipo_testkit.nemo_rl.nemo_rl_loop import train_metrics
from tests.nemo_rl import test_contract

nemo_rl_cpu, contract_model = test_contract.nemo_rl_cpu, test_contract.contract_model

# Two 3-step runs of NeMo-RL's TransferQueue loop on 2 shared cores: outside CI's set
# (scripts/test_nemo_rl.sh runs it); the driver's choice of loop is in CI (test_driver_loops).
pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow, pytest.mark.contract_full]

STEPS, CHECKPOINT_STEP = test_contract.STEPS, test_contract.CHECKPOINT_STEP


def tq_config(contract_model, out) -> dict:
    from clipo_testkit.nemo_rl.cpu_session import make_tq
    from clipo_testkit.nemo_rl.nemo_rl_loop import contract_config

    cfg = contract_config(
        "grpo", True, model_dir=contract_model, out_dir=out, max_steps=STEPS, warmup_steps=1
    )
    return make_tq(cfg)


@pytest.fixture
def tq_actors(nemo_rl_cpu):
    """TransferQueue importable; NeMo-RL's rollout actor and TransferQueue's actors on the test's
    Python (`cpu_session.keep_tq_actors_here`)."""
    from clipo_testkit.nemo_rl.cpu_session import keep_tq_actors_here, tq_requirements

    missing = tq_requirements()
    if missing:
        pytest.skip(missing)
    keep_tq_actors_here()
    return nemo_rl_cpu


def test_grpo_train_sync_clipo(tq_actors, contract_model, tmp_path):
    """grpo_train_sync ran (its data plane carried the rows), CLIPO's four checks on every step
    (the warm-up step held the policy), then an exact resume of step 3 from step 2."""
    from clipo_testkit.nemo_rl.nemo_rl_loop import run_grpo

    cfg = tq_config(contract_model, tmp_path / "full")
    full = run_grpo(cfg, worker_fqn=tq_actors)
    assert full["resumed_from"] is None and full["clipo_step"] == STEPS
    test_contract._check_clipo(full, cfg, contract_model)
    warm = train_metrics(full, 1)
    assert warm.get("clipo/policy_updated") == 0.0, warm  # step 1: the head only

    ckpt = tmp_path / "resumed" / "ckpt"
    shutil.copytree(tmp_path / "full" / "ckpt" / f"step_{CHECKPOINT_STEP}", ckpt / "step_2")
    resumed = run_grpo(tq_config(contract_model, tmp_path / "resumed"), worker_fqn=tq_actors)
    test_contract.check_exact_resume(full, resumed, clipo_on=True, label="TransferQueue: ")
    print(
        f"\n[contract] grpo_train_sync (TransferQueue, simple backend), clipo/loss "
        f"{[round(train_metrics(full, s)['clipo/loss'], 5) for s in range(1, STEPS + 1)]}; "
        f"resumed step {STEPS} exact"
    )
