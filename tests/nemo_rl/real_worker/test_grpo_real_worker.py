# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's real `grpo_train` over NeMo-RL's real Megatron policy worker (+ the CLIPO extension).

The contract suite's run (tests/nemo_rl/test_contract.py: the recipe, `Policy` over a real
`RayWorkerGroup` on a CPU `RayVirtualCluster`, DP = 2, packing on, 3 steps, a checkpoint at step 2
and a resume in fresh actors that must repeat step 3 exactly, the four `clipo_checks` every step),
with `ray_worker.RealCpuPolicyWorker` in place of the stand-in: NeMo-RL's own `__init__`,
`get_logprobs`, `get_reference_policy_logprobs`, `train`, `save_checkpoint` and resume. Generation
stays on the CPU sampler (ray_worker.py).

Run with `NEMO_RL_SRC=.. BRIDGE_SRC=.. MEGATRON_LM_SRC=.. bash scripts/test_real_worker.sh`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.nemo_rl.real_worker.build import cpu_policy_config, requirements
from tests.nemo_rl.test_contract import (
    CHECKPOINT_STEP,
    SHARED,
    STEPS,
    WARMUP,
    _check_clipo,
    _print_table,
    _same,
)

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow]
DP = 2
# By name only: importing ray_worker here would import NeMo-RL's worker module into the driver,
# where Ray's decoration of its actor classes rewrites get_logprobs' signature (`_ray_trace_ctx`)
# and the preflight's seam check (compat.check_supported) then reads a moved seam.
REAL_WORKER_FQN = "tests.nemo_rl.real_worker.ray_worker.RealCpuPolicyWorker"


@pytest.fixture(scope="module")
def real_worker_cluster(tmp_path_factory):
    """Ray on this machine with the real-worker actor class registered (the test's own venv)."""
    missing = requirements()
    if missing:
        pytest.skip(missing)
    if not (SHARED / "train" / "gsm8k.parquet").exists():
        pytest.skip(f"the shared GSM8K parquet is missing at {SHARED}/train/gsm8k.parquet")
    import ray
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

    os.environ["NEMO_RL_ROOT"] = os.environ["NEMO_RL_SRC"]
    os.environ["CLIPO_DATA_DIR"] = str(SHARED)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    # the HF import's Megatron checkpoint, shared by every run of the module (actors inherit it)
    os.environ["NRL_MEGATRON_CHECKPOINT_DIR"] = str(tmp_path_factory.mktemp("megatron_ckpt"))
    ACTOR_ENVIRONMENT_REGISTRY[REAL_WORKER_FQN] = PY_EXECUTABLES.SYSTEM
    ray.init(num_cpus=8, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    yield REAL_WORKER_FQN
    ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)


@pytest.fixture(scope="module")
def model_dir():
    """The contract suite's fine-tuned tiny Llama (cached beside its own)."""
    from tests.nemo_rl.contract_model import build_contract_model

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    path = cache / "clipo_megatron" / "contract_model_v2"
    if not (path / "config.json").exists():
        build_contract_model(path, SHARED)
    return path


def real_worker_config(clipo_on: bool, model_dir: Path, out: Path) -> dict:
    from tests.nemo_rl.nemo_rl_loop import contract_config

    cfg = contract_config(
        "grpo",
        clipo_on,
        model_dir=model_dir,
        out_dir=out,
        max_steps=STEPS,
        warmup_steps=WARMUP,
        dp=DP,
    )
    cfg["policy"] = cpu_policy_config(cfg["policy"], out)
    return cfg


@pytest.mark.parametrize("clipo_on", [True, False], ids=["clipo", "baseline"])
def test_grpo_train_on_the_real_worker(real_worker_cluster, model_dir, tmp_path, clipo_on):
    from tests.nemo_rl.nemo_rl_loop import run_grpo, train_metrics

    full = run_grpo(
        real_worker_config(clipo_on, model_dir, tmp_path / "full"),
        worker_fqn=real_worker_cluster,
    )
    assert full["resumed_from"] is None
    assert full["packed_streams"] > 2 * STEPS, full["packed_streams"]
    for step in range(1, STEPS + 1):
        m = train_metrics(full, step)
        assert {"reward", "loss", "global_valid_toks", "token_mult_prob_error"} <= set(m), step
    if clipo_on:
        assert full["clipo_step"] == STEPS
        held = [train_metrics(full, s)["clipo/policy_updated"] == 0.0 for s in range(1, STEPS + 1)]
        assert held == [True] * WARMUP + [False] * (STEPS - WARMUP)
        _check_clipo(full, real_worker_config(clipo_on, model_dir, tmp_path / "full"), model_dir)
    else:
        assert not any(k.startswith("clipo/") for k in train_metrics(full, 1))

    ckpt = tmp_path / "resumed" / "ckpt"
    shutil.copytree(tmp_path / "full" / "ckpt" / f"step_{CHECKPOINT_STEP}", ckpt / "step_2")
    resumed = run_grpo(
        real_worker_config(clipo_on, model_dir, tmp_path / "resumed"),
        worker_fqn=real_worker_cluster,
    )
    assert resumed["resumed_from"] == f"step_{CHECKPOINT_STEP}"
    if clipo_on:  # the baseline records no per-row trace
        stage = _first_difference(full["trace"][STEPS - 1], resumed["trace"][-1])
        assert stage is None, f"resumed step {STEPS} first differs at {stage}"
    a, b = train_metrics(full, STEPS), train_metrics(resumed, STEPS)
    differ = {k: (a[k], b[k]) for k in a if not _same(a[k], b[k]) and not k.startswith("timing")}
    assert not differ, f"resumed step {STEPS} differs: {differ}"
    _print_table("grpo", clipo_on, full["flavour"], full, resumed)


def _first_difference(full: dict, resumed: dict) -> str | None:
    """The first per-row value of a step, in the order the step makes them, that a resume did not
    repeat exactly (the rollouts, the pooled states, r_CL, the advantages): names where a resume
    drifts, where the step's metrics only say that it did."""
    import torch

    for key in ("input_ids", "input_lengths", "rewards", "pooled", "r_cl", "advantages"):
        if key not in full and key not in resumed:
            continue
        a, b = full.get(key), resumed.get(key)
        if a is None or b is None or a.shape != b.shape or not torch.equal(a, b):
            diff = None if a is None or b is None or a.shape != b.shape else (a - b).abs().max()
            return f"{key} (max abs difference {diff})"
    return None


def _per_step(result: dict) -> list[dict[str, float]]:
    from tests.nemo_rl.nemo_rl_loop import train_metrics

    rows = []
    for step, entry in enumerate(result["trace"], 1):
        m = train_metrics(result, step)
        mask = entry["advantage_mask"].bool()
        rows.append(
            {
                "reward": float(entry["rewards"].float().mean()),
                "r_cl": float(entry["r_cl"].float().abs().mean()),
                "adv": float(entry["advantages"].float()[mask].abs().mean()),
                "loss": m.get("loss", float("nan")),
                "grad_norm": m.get("grad_norm", float("nan")),
            }
        )
    return rows


def test_real_worker_beside_the_stand_in(real_worker_cluster, model_dir, tmp_path):
    """Same recipe, same seed, DP = 2: the stand-in (`cpu_worker.py`) and NeMo-RL's worker. Step 1
    starts from the same weights and samples with the same CPU sampler: the same rollouts, so the
    same rewards, r_CL and advantages; the losses differ only by float order (packed vs unpacked)."""
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

    from clipo_megatron.nemo_rl.cpu_worker import CPU_WORKER_FQN
    from tests.nemo_rl.nemo_rl_loop import run_grpo

    ACTOR_ENVIRONMENT_REGISTRY[CPU_WORKER_FQN] = PY_EXECUTABLES.SYSTEM
    stand_in = _per_step(
        run_grpo(real_worker_config(True, model_dir, tmp_path / "s"), worker_fqn=CPU_WORKER_FQN)
    )
    real = _per_step(
        run_grpo(
            real_worker_config(True, model_dir, tmp_path / "r"), worker_fqn=real_worker_cluster
        )
    )
    print("\n| step | worker | reward | mean abs r_CL | mean abs advantage | loss | grad norm |")
    print("|---|---|---|---|---|---|---|")
    for step, (a, b) in enumerate(zip(stand_in, real), 1):
        for name, row in (("stand-in", a), ("real", b)):
            print(f"| {step} | {name} | " + " | ".join(f"{row[k]:.6g}" for k in row) + " |")
    assert stand_in[0]["reward"] == real[0]["reward"]
    for key in ("r_cl", "adv"):
        assert abs(stand_in[0][key] - real[0][key]) <= 1e-4, (key, stand_in[0], real[0])
