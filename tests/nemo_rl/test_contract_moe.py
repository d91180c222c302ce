# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A mixture-of-experts policy with expert parallelism inside NeMo-RL's real `grpo_train`: the
contract's Qwen3-MoE (4 experts, top-2, the router's load-balancing loss on; fine-tuned as the dense
contract model is, so groups mix correct and wrong rollouts), EP 2 on two of NeMo-RL's Megatron
workers (the token dispatcher's all-to-all over gloo, `real_worker/test_moe_layouts.py` says what
stands in), generation by worker 0 with its EP peer following each forward (`tp_generation`).

3 steps (a head-only warm-up, a checkpoint at step 2), CLIPO's four checks on every step, the
router's aux loss logged by NeMo-RL on every step, then a resume from step 2 in fresh actors that
must repeat step 3 exactly (the trace, every logged metric, the head and its AdamW).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from clipo_testkit.nemo_rl.nemo_rl_loop import train_metrics
from clipo_testkit.nemo_rl.real_worker.layouts import Layout
from tests.nemo_rl import test_contract
from tests.nemo_rl.test_contract import (
    CHECKPOINT_STEP,
    SHARED,
    STEPS,
    WARMUP,
    _check_clipo,
    check_exact_resume,
    layout_config,
)

nemo_rl_cpu = test_contract.nemo_rl_cpu  # Ray with NeMo-RL's worker registered

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow, pytest.mark.contract_full]

EP2 = Layout(dp=2, ep=2)


@pytest.fixture(scope="module")
def moe_contract_model(nemo_rl_cpu, tmp_path_factory) -> Path:
    """The contract model's fine-tune on a tiny Qwen3-MoE (`moe_model.tiny_moe_model`'s shape)."""
    import transformers

    from clipo_testkit.nemo_rl.contract_model import build_contract_model
    from clipo_testkit.nemo_rl.real_worker.moe_model import tiny_moe_model

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    path = cache / "clipo_megatron" / "contract_moe_model_v1"
    if not (path / "config.json").exists():
        shape = tiny_moe_model(tmp_path_factory.mktemp("moe_shape") / "model")
        config = transformers.AutoConfig.from_pretrained(shape)
        build_contract_model(path, SHARED, config=config)
    return path


def _aux_losses(run: dict) -> list[float]:
    """NeMo-RL's logged load-balancing loss (`moe/...`, from the worker's `moe_metrics`) of each
    step that trained the policy; the head-only warm-up steps run no policy `train`, so none."""
    out = []
    for step in range(1, STEPS + 1):
        logged = train_metrics(run, step)
        keys = [k for k in logged if k.startswith("moe/") and "load_balancing_loss" in k]
        if step <= WARMUP:
            assert not keys, f"warm-up step {step} trained the policy: {keys}"
            continue
        assert keys, f"step {step}: no router aux loss logged: {sorted(logged)}"
        out.append(float(logged[keys[0]]))
    return out


def test_moe_ep2_in_grpo_train(nemo_rl_cpu, moe_contract_model, tmp_path):
    from clipo_testkit.nemo_rl.nemo_rl_loop import run_grpo

    cfg = layout_config(moe_contract_model, tmp_path / "full", EP2)
    full = run_grpo(cfg, worker_fqn=nemo_rl_cpu, layout=EP2)
    assert full["resumed_from"] is None and full["clipo_step"] == STEPS
    held = [train_metrics(full, s)["clipo/policy_updated"] == 0.0 for s in range(1, STEPS + 1)]
    assert held == [True] * WARMUP + [False] * (STEPS - WARMUP)
    _check_clipo(full, cfg, moe_contract_model)
    aux = _aux_losses(full)
    assert all(a > 0 for a in aux), aux  # the router's loss is on and NeMo-RL logs it

    ckpt = tmp_path / "resumed" / "ckpt"
    shutil.copytree(tmp_path / "full" / "ckpt" / f"step_{CHECKPOINT_STEP}", ckpt / "step_2")
    resumed = run_grpo(
        layout_config(moe_contract_model, tmp_path / "resumed", EP2),
        worker_fqn=nemo_rl_cpu,
        layout=EP2,
    )
    check_exact_resume(full, resumed, clipo_on=True, label=f"moe {EP2.name}: ")
    print(
        f"\n[contract] MoE {EP2.name} in grpo_train, steps 1-{STEPS}: "
        f"{[round(train_metrics(full, s)['clipo/loss'], 5) for s in range(1, STEPS + 1)]} "
        f"(clipo/loss), router aux loss {[round(a, 6) for a in aux]}; resumed step {STEPS} exact"
    )
