# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""GPU acceptance kit, tier 2: the contract run on NeMo-RL's real `MegatronPolicyWorker`.

Inside NeMo-RL's container (`nvcr.io/nvidia/nemo-rl:v0.7.0` or a main build), with
`scripts/check_gpu.sh --tier 2`. The same loop as the CPU contract suite
(`nemo_rl_loop.run_grpo`: NeMo-RL's `grpo_train`, `Policy`, `RayWorkerGroup`,
`MegatronGeneration`, `CheckpointManager`), but on a GPU `RayVirtualCluster` and with
the project's worker extension over NeMo-RL's own Megatron worker
(`worker_extension.ClipoMegatronPolicyWorker`, which `gpu_worker.py` subclasses with the
checks' reads and hands NeMo-RL by `worker_extension_cls_fqn`; Megatron-Bridge import of the HF
checkpoint, bf16, TransformerEngine), sequence packing on (the pooler reads THD
microbatches), DP = the GPUs present (the largest divisor of 8 not above them: the
contract batch is 16 rollouts in minibatches of 8). Nothing is downloaded: a tiny Llama +
character tokenizer and a synthetic GSM8K-layout parquet are written to a tmp dir.

Checked: 2 GRPO steps (step 1 head-only warm-up, step 2 a policy update) with the CLIPO
metrics logged, a checkpoint at step 1 holding the head, and a run that resumes from it
in fresh Ray actors: it starts at step 2 with the head, its AdamW state and step count
exactly as saved. (The CPU suite also asserts the resumed step's numbers equal the
uninterrupted run's; on GPUs NeMo-RL's own sampling RNG is not restored on resume, so
those are printed side by side, not asserted.)

Not run in this project: no GPU was lent to the session that wrote it.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest

from clipo_testkit.nemo_rl.nemo_rl_loop import train_metrics as _train_metrics

pytestmark = [pytest.mark.gpu, pytest.mark.nemo_rl, pytest.mark.slow]
STEPS, WARMUP = 2, 1


def missing() -> str | None:
    """What this machine lacks for tier 2, in words (None: nothing)."""
    try:
        import torch
    except ImportError:
        return "torch is not importable"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return "no CUDA GPU here (torch.cuda.device_count() == 0): run it on a GPU node"
    try:
        import nemo_rl.algorithms.grpo  # noqa: F401
        import ray  # noqa: F401
    except ImportError as e:
        return (
            f"NeMo-RL is not importable ({e}): run tier 2 inside NeMo-RL's container "
            "(nvcr.io/nvidia/nemo-rl:v0.7.0) with PYTHON=<its python>"
        )
    try:
        import megatron.bridge  # noqa: F401
    except ImportError as e:
        return f"Megatron-Bridge is missing ({e}): NeMo-RL's Megatron worker needs it (mcore extra)"
    return None


def data_parallel_size(gpus: int) -> int:
    """The largest divisor of 8 (the contract's minibatch) not above the GPUs present."""
    return max(d for d in (1, 2, 4, 8) if d <= gpus)


def write_gsm8k_like(root: Path, n_train: int = 16, n_test: int = 4) -> Path:
    """train/gsm8k.parquet and test/gsm8k.parquet in the authors' verl layout, made up here."""
    import pandas as pd

    suffix = "\nLet's think step by step and output the final answer within \\boxed{}."
    for split, n, offset in (("train", n_train, 0), ("test", n_test, 100)):
        rows = []
        for i in range(n):
            a, b = 3 + i + offset, 7 + 2 * i
            rows.append(
                {
                    "data_source": "synthetic/gsm8k",
                    "prompt": [{"role": "user", "content": f"What is {a} + {b}?{suffix}"}],
                    "ability": "math",
                    "reward_model": {"ground_truth": str(a + b), "style": "rule"},
                    "extra_info": {"index": i, "split": split},
                }
            )
        (root / split).mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(root / split / "gsm8k.parquet")
    return root


@pytest.fixture(scope="module")
def gpu_setup(tmp_path_factory):
    """Ray through NeMo-RL's init_ray, recipes and data found, the tiny model written."""
    why = missing()
    if why:
        pytest.skip(why)
    import ray
    import torch
    from nemo_rl.distributed.virtual_cluster import init_ray

    from clipo_testkit.nemo_rl.contract_model import build_contract_model

    root = tmp_path_factory.mktemp("gpu_contract")
    data = write_gsm8k_like(root / "data")
    os.environ["CLIPO_DATA_DIR"] = str(data)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    model = build_contract_model(root / "model", data)  # a few seconds of plain torch
    init_ray()  # forwards this environment (PYTHONPATH with this checkout) to every actor
    # NeMo-RL's memory tracker asks Ray for "the" cluster: name ours (as the CPU suite does)
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    yield {"model": model, "root": root, "dp": data_parallel_size(torch.cuda.device_count())}
    ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)


def two_steps_and_resume(root: Path, model: Path, dp: int, *, worker_fqn, use_gpus, packing):
    """The tier-2 run and its checks; parametrised by worker so it can be tried with the CPU
    stand-in worker on a machine without GPUs (`use_gpus=False, packing=False`)."""
    import torch

    from clipo_testkit.nemo_rl.nemo_rl_loop import contract_config, run_grpo

    def config(out: Path):
        cfg = contract_config(
            "grpo", True, model_dir=model, out_dir=out, max_steps=STEPS, warmup_steps=WARMUP,
            dp=dp, packing=packing,
        )  # fmt: skip
        cfg["checkpointing"]["save_period"] = 1
        return cfg

    full = run_grpo(config(root / "full"), worker_fqn=worker_fqn, use_gpus=use_gpus)
    assert full["resumed_from"] is None and full["clipo_step"] == STEPS
    for step in range(1, STEPS + 1):
        m = _train_metrics(full, step)
        assert {"reward", "loss", "global_valid_toks", "clipo/loss"} <= set(m), (step, sorted(m))
        assert m["global_valid_toks"] > 0 and math.isfinite(m["clipo/loss"])
        assert m["clipo/policy_updated"] == float(step > WARMUP)
    head_file = root / "full" / "ckpt" / "step_1" / "clipo_head" / "head.pt"
    assert head_file.exists(), f"no CLIPO head saved with the step-1 checkpoint at {head_file}"

    ckpt = root / "resumed" / "ckpt"
    shutil.copytree(root / "full" / "ckpt" / "step_1", ckpt / "step_1")
    resumed = run_grpo(config(root / "resumed"), worker_fqn=worker_fqn, use_gpus=use_gpus)
    assert resumed["resumed_from"] == "step_1" and resumed["clipo_step"] == STEPS
    saved = torch.load(head_file, map_location="cpu", weights_only=False)["trainer"]
    loaded = [s for s in resumed["head_at_start"] if s]
    assert loaded, "no last-stage worker reported a CLIPO head after the resume"
    for state in loaded:  # every DP replica loaded the same head, AdamW state and step count
        torch.testing.assert_close(state, saved, rtol=0, atol=0)
    keys = ("reward", "loss", "clipo/loss", "clipo/valid_group_frac", "clipo/reward_mean")
    for name, run in (("uninterrupted", full), ("resumed", resumed)):
        m = _train_metrics(run, STEPS)
        print(f"[tier 2] step {STEPS} {name}: " + str({k: round(m[k], 5) for k in keys if k in m}))


def test_real_megatron_worker_two_steps_and_resume(gpu_setup):
    import torch

    from clipo_megatron.nemo_rl.worker_env import register_clipo_worker_env
    from clipo_testkit.nemo_rl.inspection import INSPECTED_GPU_WORKER_FQN

    # the product's worker with the checks' reads, in the venv NeMo-RL gives the product's worker
    register_clipo_worker_env(INSPECTED_GPU_WORKER_FQN)
    dp = gpu_setup["dp"]
    print(f"\n[tier 2] DP = {dp} ({torch.cuda.device_count()} GPUs present), packing on")
    two_steps_and_resume(
        gpu_setup["root"], gpu_setup["model"], dp, worker_fqn=INSPECTED_GPU_WORKER_FQN, use_gpus=True,
        packing=True,
    )  # fmt: skip
