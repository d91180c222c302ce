# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What every run of NeMo-RL's loops on CPU needs before `nemo_rl_loop.run_grpo`: Ray with NeMo-RL's
worker (and, for async GRPO, its collector and replay buffer) registered on this Python, the
contract model, and the async recipe. One home for the contract tests' fixtures and for
`bench/bench_async_throughput.py`, which runs the same loops outside pytest.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "clipo"

# By name only: importing ray_worker here would import NeMo-RL's worker module into the driver,
# where Ray's decoration of its actor classes rewrites get_logprobs' signature (`_ray_trace_ctx`)
# and the preflight's seam check (compat.check_supported) then reads a moved seam.
REAL_WORKER_FQN = "clipo_testkit.nemo_rl.real_worker.ray_worker.RealCpuPolicyWorker"

# NeMo-RL's async GRPO actors; NeMo-RL gives them its vLLM venv, which this machine does not build.
ASYNC_ACTORS = (
    "nemo_rl.algorithms.async_utils.AsyncTrajectoryCollector",
    "nemo_rl.algorithms.async_utils.ReplayBuffer",
)
# The TransferQueue loop's rollout actor (NeMo-RL: its vLLM venv, likewise)
TQ_ACTORS = ("nemo_rl.experience.sync_rollout_actor.SyncRolloutActor",)
# TransferQueue's simple backend with one storage unit (its controller and each unit take a Ray
# CPU; the `*-tq_simple` recipes' backend)
DATA_PLANE = {
    "enabled": True,
    "impl": "transfer_queue",
    "backend": "simple",
    "storage_capacity": 10_000,
    "num_storage_units": 1,
    "claim_meta_poll_interval_s": 0.05,
}


def requirements() -> str | None:
    """Why NeMo-RL's loops cannot run here (one line), or None."""
    from clipo_testkit.nemo_rl.real_worker.build import requirements as worker_requirements

    missing = worker_requirements()
    if missing:
        return missing
    if not (SHARED / "train" / "gsm8k.parquet").exists():
        return f"the shared GSM8K parquet is missing at {SHARED}/train/gsm8k.parquet"
    try:
        import nemo_rl.algorithms.grpo  # noqa: F401
        import ray  # noqa: F401
    except ImportError as e:  # pragma: no cover - wrong environment
        return f"NeMo-RL does not import here ({e}); use scripts/test_nemo_rl.sh"
    return None


@contextlib.contextmanager
def ray_session(
    megatron_ckpt_dir: Path, *, async_actors: bool = False, tq_actors: bool = False
) -> Iterator[str]:
    """Ray on this machine, NEMO_RL_ROOT / CLIPO_DATA_DIR for the recipes, and NeMo-RL's own
    Megatron worker with the CLIPO extension (`real_worker/ray_worker.py`) registered; yields the
    worker's name. `async_actors` / `tq_actors`: NeMo-RL's async (TransferQueue) loop's actors
    on this Python too (left registered; `keep_tq_actors_here`)."""
    import ray
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

    os.environ["NEMO_RL_ROOT"] = os.environ["NEMO_RL_SRC"]
    os.environ["CLIPO_DATA_DIR"] = str(SHARED)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")  # Policy asks for it on the Megatron path
    # the HF import's Megatron checkpoint, shared by every run of the session (actors inherit it)
    os.environ["NRL_MEGATRON_CHECKPOINT_DIR"] = str(megatron_ckpt_dir)
    ACTOR_ENVIRONMENT_REGISTRY[REAL_WORKER_FQN] = PY_EXECUTABLES.SYSTEM  # the test's own venv
    if async_actors:
        for fqn in ASYNC_ACTORS:
            ACTOR_ENVIRONMENT_REGISTRY[fqn] = PY_EXECUTABLES.SYSTEM
    if tq_actors:
        keep_tq_actors_here()
    # A session directory of our own (short: Ray's socket paths must fit 107 bytes): a leftover
    # /tmp/ray session or a zombie cluster from an earlier, killed run is not ours to meet.
    ray_tmp = tempfile.mkdtemp(prefix="clipo_ray_")
    ray.init(
        num_cpus=8,
        include_dashboard=False,
        ignore_reinit_error=True,
        log_to_driver=False,
        _temp_dir=ray_tmp,
    )
    # NeMo-RL's memory tracker asks Ray for "the" local cluster (address auto): name ours, so a
    # second Ray instance on the machine (another suite, another version) is not ambiguous.
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    try:
        yield REAL_WORKER_FQN
    finally:
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        os.environ.pop("RAY_ADDRESS", None)
        os.environ.pop("NRL_MEGATRON_CHECKPOINT_DIR", None)


def tq_requirements() -> str | None:
    """Why the TransferQueue loop cannot run here (one line), or None."""
    if importlib.util.find_spec("transfer_queue") is None:
        return "TransferQueue is not installed (scripts/test_nemo_rl.sh adds it to its overlay)"
    return None


def keep_tq_actors_here() -> None:
    """NeMo-RL's rollout actor on this Python, and TransferQueue's actors too: NeMo-RL gives them
    a pip runtime_env of its TransferQueue pin (a GitHub URL, read from the installed nemo-rl's
    metadata), which a machine without that install or network cannot build."""
    from nemo_rl.data_plane.adapters import transfer_queue as tq_adapter
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

    for fqn in TQ_ACTORS:
        ACTOR_ENVIRONMENT_REGISTRY[fqn] = PY_EXECUTABLES.SYSTEM
    tq_adapter._TQ_RUNTIME_ENV_PATCHED = True


def make_tq(cfg: dict[str, Any]) -> dict[str, Any]:
    """The recipe with `data_plane.enabled` (NeMo-RL's grpo_train_sync), `DATA_PLANE`'s backend
    (in place; returned)."""
    cfg["data_plane"] = {**(cfg.get("data_plane") or {}), **DATA_PLANE}
    return cfg


def contract_model_dir() -> Path:
    """The contract model (clipo_testkit/nemo_rl/contract_model.py), built once into the user's cache."""
    from clipo_testkit.nemo_rl.contract_model import build_contract_model

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    path = cache / "clipo_megatron" / "contract_model_v2"
    if not (path / "config.json").exists():
        build_contract_model(path, SHARED)
    return path


def make_async(cfg: dict[str, Any], age: int) -> dict[str, Any]:
    """The recipe with `grpo.async_grpo.enabled` and trajectories up to `age` steps old; the
    importance-sampling correction on, as async_grpo_train asserts (in place; returned)."""
    cfg["grpo"]["async_grpo"].update(enabled=True, max_trajectory_age_steps=age)
    cfg["loss_fn"]["use_importance_sampling_correction"] = True
    return cfg
