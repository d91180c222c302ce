# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Track II's layout inside NeMo-RL's real `grpo_train`: TP 2 + sequence parallel with the
distributed optimizer (grad-reduce and param-gather overlap on, as the recipes set them), two of
NeMo-RL's Megatron workers in its `RayWorkerGroup`, the generation sampler gathering the
vocab-parallel logits (`real_worker/ray_worker.py`).

3 steps (a head-only warm-up, a checkpoint at step 2), CLIPO's four checks on every step
(`test_contract._check_clipo`), then a resume from step 2 in fresh actors that must repeat step 3
exactly (the trace, every logged metric, the head and its AdamW). The fp32 case is in CI's set
and is its only exact resume (the other resumes are `contract_full`). bf16, Track II as it runs,
is `contract_full`; its pooled-state bound is derived as in `real_worker.layouts`.
"""

from __future__ import annotations

import json
import shutil

import pytest

from clipo_testkit.nemo_rl.nemo_rl_loop import train_metrics
from clipo_testkit.nemo_rl.real_worker.layouts import Layout
from tests.nemo_rl import test_contract
from tests.nemo_rl.test_contract import (
    CHECKPOINT_STEP,
    STEPS,
    WARMUP,
    _check_clipo,
    check_exact_resume,
)

# the contract module's fixtures (Ray with NeMo-RL's worker registered; the contract model)
nemo_rl_cpu, contract_model = test_contract.nemo_rl_cpu, test_contract.contract_model

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow]

TRACK2 = {
    "tp2-sp-distopt": Layout(tp=2, sp=True, dist_opt=True),
    "tp2-sp-distopt-bf16": pytest.param(
        Layout(tp=2, sp=True, dist_opt=True, bf16=True), marks=pytest.mark.contract_full
    ),
    # the actors under `clipo_testkit.emulated_cuda` (CUDA's device rules; gloo groups declared NCCL):
    # DP 2, the checkpoint saved, and the resume
    "dp2-emulated": pytest.param(Layout(dp=2, emulated=True), marks=pytest.mark.contract_full),
}


def _config(contract_model, out, layout: Layout) -> dict:
    from clipo_testkit.nemo_rl.nemo_rl_loop import contract_config

    return contract_config(
        "grpo",
        True,
        model_dir=contract_model,
        out_dir=out,
        max_steps=STEPS,
        warmup_steps=WARMUP,
        dp=layout.dp,
        world=layout.world,
    )


def _pooled_tol(layout: Layout, contract_model) -> float:
    """fp32: the contract's 1e-4; bf16: the derived relative bound times the states' scale (the
    final norm's output is of order 1; its largest entry on this model stays under 4)."""
    if not layout.bf16:
        return 1e-4
    from clipo_testkit.nemo_rl.real_worker.layouts import bf16_relative_bound

    layers = json.loads((contract_model / "config.json").read_text())["num_hidden_layers"]
    return bf16_relative_bound(layers) * 4.0


@pytest.mark.parametrize("layout", list(TRACK2.values()), ids=list(TRACK2))
def test_track2_layout_in_grpo_train(nemo_rl_cpu, contract_model, tmp_path, layout, monkeypatch):
    from clipo_testkit.nemo_rl.nemo_rl_loop import run_grpo
    from clipo_testkit.nemo_rl.real_worker.cpu_patches import EMULATED

    if layout.emulated:  # NeMo-RL hands the driver's environment to its actors
        monkeypatch.setenv(EMULATED, "1")

    cfg = _config(contract_model, tmp_path / "full", layout)
    full = run_grpo(cfg, worker_fqn=nemo_rl_cpu, layout=layout)
    assert full["resumed_from"] is None and full["clipo_step"] == STEPS
    held = [train_metrics(full, s)["clipo/policy_updated"] == 0.0 for s in range(1, STEPS + 1)]
    assert held == [True] * WARMUP + [False] * (STEPS - WARMUP)
    _check_clipo(full, cfg, contract_model, pooled_tol=_pooled_tol(layout, contract_model))

    ckpt = tmp_path / "resumed" / "ckpt"
    shutil.copytree(tmp_path / "full" / "ckpt" / f"step_{CHECKPOINT_STEP}", ckpt / "step_2")
    resumed = run_grpo(
        _config(contract_model, tmp_path / "resumed", layout), worker_fqn=nemo_rl_cpu, layout=layout
    )
    check_exact_resume(full, resumed, clipo_on=True, label=f"{layout.name}: ")
    print(
        f"\n[contract] {layout.name} in grpo_train, steps 1-{STEPS}: "
        f"{[round(train_metrics(full, s)['clipo/loss'], 5) for s in range(1, STEPS + 1)]} "
        f"(clipo/loss); resumed step {STEPS} exact"
    )
