# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Worker venv decision (clipo_megatron/nemo_rl/worker_env.py): pure cases on CPU, plus a check
against NeMo-RL's own registry / venv functions when NEMO_RL_SRC names a NeMo-RL checkout."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

from clipo_megatron.nemo_rl import worker_env as we

MCORE = "uv run --locked --extra mcore --directory /opt/nemo-rl"
STOCK = "nemo_rl.models.policy.workers.megatron_policy_worker.MegatronPolicyWorker"


def _prefetched(venvs) -> str:
    """The stock worker's prefetched venv under `venvs` (its python as a file)."""
    python = venvs / STOCK / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    return str(python)


def test_prefetched_stock_venv_is_reused_verbatim(tmp_path):
    stock_py = _prefetched(tmp_path)
    d = we.decide_worker_env(MCORE, str(tmp_path))
    assert d.py_executable == stock_py and d.source == "stock-venv"
    assert not d.py_executable.startswith("uv")  # NeMo-RL builds only for "uv..." values
    assert stock_py in d.description and "no build" in d.description


def test_missing_stock_venv_falls_back_to_the_stock_uv_command(tmp_path):
    d = we.decide_worker_env(MCORE, str(tmp_path))
    assert d.py_executable == MCORE and d.source == "build-at-start"
    assert f"{tmp_path}/{STOCK}/bin/python not found" in d.description
    assert "prefetch_venvs MegatronPolicyWorker" in d.description


def test_system_executable_is_mirrored_not_redirected(tmp_path):
    # NEMO_RL_PY_EXECUTABLES_SYSTEM=1 makes the stock value sys.executable: use it as is.
    _prefetched(tmp_path)
    d = we.decide_worker_env("/usr/bin/python3", str(tmp_path))
    assert (d.py_executable, d.source) == ("/usr/bin/python3", "stock-verbatim")


def test_override_wins(tmp_path):
    _prefetched(tmp_path)
    d = we.decide_worker_env(MCORE, str(tmp_path), override="/my/py")
    assert (d.py_executable, d.source) == ("/my/py", "override")
    assert we.OVERRIDE_ENV in d.description


def test_venv_dir_mirrors_nemo_rl_default_and_env():
    assert we.venv_dir_of({}, "/opt/nemo-rl/venvs") == "/opt/nemo-rl/venvs"
    assert we.venv_dir_of({"NEMO_RL_VENV_DIR": "/opt//ray_venvs/"}, "/d") == "/opt/ray_venvs"


def test_real_filesystem_check(tmp_path):
    py = tmp_path / STOCK / "bin" / "python"
    assert we.decide_worker_env(MCORE, str(tmp_path)).source == "build-at-start"
    py.parent.mkdir(parents=True)
    py.write_text("")
    assert we.decide_worker_env(MCORE, str(tmp_path)).py_executable == str(py)


def test_pythonpath_with():
    assert we.pythonpath_with("/c", None) == "/c"
    assert we.pythonpath_with("/c", "/a:/b") == "/c:/a:/b"
    assert we.pythonpath_with("/c", "/a:/c/:") == "/a:/c/"


def test_project_root_is_this_checkout():
    root = we.project_root()
    assert root is not None and (root / "clipo_megatron" / "nemo_rl" / "worker_env.py").is_file()


def _nemo_rl_from_src():
    src = os.environ.get("NEMO_RL_SRC")
    if not src or not os.path.isfile(os.path.join(src, "nemo_rl", "__init__.py")):
        pytest.skip(
            "NEMO_RL_SRC is missing: set NEMO_RL_SRC=/path/to/NeMo-RL checkout "
            f"(got {src!r}) to check against NeMo-RL's registry"
        )
    if src not in sys.path:
        sys.path.insert(0, src)
    try:
        registry = importlib.import_module("nemo_rl.distributed.ray_actor_environment_registry")
        venvs = importlib.import_module("nemo_rl.utils.venvs")
    except ImportError as e:  # e.g. ray absent from this interpreter
        pytest.skip(f"NEMO_RL_SRC={src} does not import here: {e}")
    assert os.path.realpath(registry.__file__).startswith(os.path.realpath(src))
    return registry, venvs


@pytest.mark.nemo_rl
def test_against_nemo_rl_registry(tmp_path, monkeypatch):
    registry, venvs = _nemo_rl_from_src()
    from clipo_megatron.nemo_rl.policy import WORKER_FQN

    monkeypatch.setenv("NEMO_RL_VENV_DIR", str(tmp_path))
    monkeypatch.delenv(we.OVERRIDE_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setitem(registry.ACTOR_ENVIRONMENT_REGISTRY, WORKER_FQN, "unset")
    stock_value = registry.get_actor_python_env(we.STOCK_MEGATRON_WORKER_FQN)
    assert we.STOCK_MEGATRON_WORKER_FQN in registry.ACTOR_ENVIRONMENT_REGISTRY
    assert stock_value == registry.MCORE_EXECUTABLE and stock_value.startswith("uv")

    # not prefetched: the stock uv command (NeMo-RL's behaviour for an unknown venv)
    we.register_clipo_worker_env(WORKER_FQN)
    assert registry.get_actor_python_env(WORKER_FQN) == stock_value

    # prefetched: NeMo-RL's own per-node builder returns the existing stock venv without
    # building; our worker must resolve to that same interpreter, and not to a uv command.
    stock_py = tmp_path / we.STOCK_MEGATRON_WORKER_FQN / "bin" / "python"
    stock_py.parent.mkdir(parents=True)
    stock_py.write_text("")
    nemo_rl_path = venvs._env_builder._function(stock_value, we.STOCK_MEGATRON_WORKER_FQN, 0)
    desc = we.register_clipo_worker_env(WORKER_FQN)
    ours = registry.get_actor_python_env(WORKER_FQN)
    assert ours == nemo_rl_path == str(stock_py)
    assert not ours.startswith("uv") and "no build" in desc
    # what RayWorkerGroup then sets as VIRTUAL_ENV (worker_groups.py: dirname(dirname(py)))
    assert os.path.dirname(os.path.dirname(ours)) == str(stock_py.parent.parent)
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(we.project_root())
