# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which Python the CLIPO Megatron worker actors run in: the stock Megatron worker's prefetched venv.

Why this module exists. NeMo-RL picks an actor's interpreter from
`ACTOR_ENVIRONMENT_REGISTRY[<actor class FQN>]` (`get_actor_python_env`). When that value
starts with "uv" (e.g. `PY_EXECUTABLES.MCORE`, "uv run --locked --extra mcore ..."),
`RayWorkerGroup` builds a venv named after the *actor's* FQN on every node at job start
(`create_local_venv_on_each_node(..., venv_name=<actor FQN>)` -> `$NEMO_RL_VENV_DIR/<FQN>`);
any other value is used verbatim as the actor's `py_executable`. The stock container
prefetched the venvs of the classes registered when it was built (`prefetch_venvs.py`,
keyed by FQN), so registering our subclass with `MCORE_EXECUTABLE` makes every job build
a second copy of the mcore venv (`uv sync --extra mcore`) on every node before training.
`NEMO_RL_PY_EXECUTABLES_SYSTEM=1` avoids that but sends vLLM and every other actor to the
base env, which the image builds without extras.

What we do instead: register our worker with the *absolute interpreter path* of the stock
`MegatronPolicyWorker` venv, `$NEMO_RL_VENV_DIR/<stock FQN>/bin/python`, when it exists.
A non-"uv" value is taken verbatim, so nothing is built, and the worker runs in exactly the
environment the stock worker (our base class) runs in. Our package is pure Python on top
of torch / megatron-core; it reaches the worker through PYTHONPATH (the driver's
environment is forwarded to every actor by NeMo-RL). See docs/slurm.md for the evidence.

`decide_worker_env` is the NeMo-RL-free decision (tested on CPU);
`register_clipo_worker_env` applies it to NeMo-RL's registry.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clipo_megatron.nemo_rl.port.grpo_loop import STOCK_MEGATRON_WORKER_FQN

OVERRIDE_ENV = "CLIPO_WORKER_PY_EXECUTABLE"  # an explicit interpreter wins over everything


@dataclass(frozen=True)
class WorkerEnvDecision:
    py_executable: str  # the registry value for our worker class
    source: str  # "override" | "stock-verbatim" | "stock-venv" | "build-at-start"
    description: str


def venv_dir_of(environ: Mapping[str, str], default_venv_dir: str) -> str:
    """NeMo-RL's venv root: `normpath($NEMO_RL_VENV_DIR or <nemo-rl checkout>/venvs)` (utils/venvs.py)."""
    return os.path.normpath(environ.get("NEMO_RL_VENV_DIR", default_venv_dir))


def stock_venv_python(venv_dir: str) -> str:
    """Where NeMo-RL puts (and prefetch_venvs.py prefetched) the stock worker's interpreter."""
    return os.path.join(venv_dir, STOCK_MEGATRON_WORKER_FQN, "bin", "python")


def decide_worker_env(
    stock_py_executable: str,
    venv_dir: str,
    *,
    override: str | None = None,
) -> WorkerEnvDecision:
    """The interpreter for our worker, given the stock worker's registry value and the venv root.

    Order: an explicit override; a stock value that is not a uv command (NeMo-RL uses it
    verbatim, e.g. `sys.executable` under NEMO_RL_PY_EXECUTABLES_SYSTEM=1 or a custom
    registry); the stock worker's existing venv; else the stock uv command, which makes
    NeMo-RL build `<venv_dir>/<our FQN>` at job start (what a bare checkout does anyway).
    """
    if override:
        return WorkerEnvDecision(
            override, "override", f"CLIPO worker python: {override} (from ${OVERRIDE_ENV})"
        )
    if not stock_py_executable.startswith("uv"):
        return WorkerEnvDecision(
            stock_py_executable,
            "stock-verbatim",
            f"CLIPO worker python: {stock_py_executable} (the stock Megatron worker's, used as is)",
        )
    python = stock_venv_python(venv_dir)
    if os.path.exists(python):
        return WorkerEnvDecision(
            python,
            "stock-venv",
            f"CLIPO worker python: {python} (the stock Megatron worker's prefetched venv; no build)",
        )
    return WorkerEnvDecision(
        stock_py_executable,
        "build-at-start",
        f"CLIPO worker python: '{stock_py_executable}' -> NeMo-RL builds a venv under {venv_dir} "
        f"at job start ({python} not found; prefetch it: python -m nemo_rl.utils.prefetch_venvs "
        "MegatronPolicyWorker)",
    )


def pythonpath_with(root: str, current: str | None) -> str:
    """`current` with `root` first unless already on it (workers in another venv import us via it)."""
    parts = [p for p in (current or "").split(os.pathsep) if p]
    if os.path.normpath(root) in {os.path.normpath(p) for p in parts}:
        return os.pathsep.join(parts)
    return os.pathsep.join([root, *parts])


def project_root() -> Path | None:
    """The source checkout holding this package, or None when installed as a wheel.

    Only a checkout is put on PYTHONPATH: a site-packages directory would drag the
    driver's other packages into the worker venv.
    """
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def register_clipo_worker_env(worker_fqn: str) -> str:
    """Point NeMo-RL's registry entry for `worker_fqn` at the stock Megatron worker's venv.

    Also makes sure the checkout is on PYTHONPATH when the worker runs in another
    interpreter (NeMo-RL copies `os.environ` into every worker's runtime_env). Returns a
    one-line description for the driver log.
    """
    import sys

    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    from clipo_megatron.nemo_rl.port.grpo_loop import (
        default_venv_dir,
        register_actor_python_env,
        stock_worker_python,
    )

    decision = decide_worker_env(
        stock_worker_python(),
        venv_dir_of(os.environ, default_venv_dir()),
        override=os.environ.get(OVERRIDE_ENV),
    )
    register_actor_python_env(worker_fqn, decision.py_executable)
    root = project_root()
    if root is not None and decision.py_executable != sys.executable:
        os.environ["PYTHONPATH"] = pythonpath_with(str(root), os.environ.get("PYTHONPATH"))
    return decision.description
