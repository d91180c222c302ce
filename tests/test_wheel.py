# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`pip install .` installs the product and nothing else: the wheel pip builds from this checkout
holds the package (every module, the configs) and no test kit (`clipo_testkit/`, `tests/`).

The wheel is built from a copy of the checkout (pip, no build isolation: setuptools from this
environment), so a stale `build/` here can neither hide a fault nor leave files behind."""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "clipo_megatron"
KIT = ROOT / "clipo_testkit"
# not copied: what .gitignore keeps out (venvs, caches, build output, runs); the build needs none
LEFT_BEHIND = (".*", "build", "dist", "*.egg-info", "runs", "outputs", "slurm-logs", "__pycache__")


def _setuptools_ok() -> bool:
    try:
        return int(md.version("setuptools").split(".")[0]) >= 77  # pyproject's build requirement
    except md.PackageNotFoundError:
        return False


def build_wheel(src: Path, out: Path) -> Path:
    """The wheel `pip install .` would install from the checkout `src` (copied into `out`)."""
    if not _setuptools_ok():
        pytest.skip("setuptools >= 77 is not installed here (the build needs it)")
    tree = out / "src"
    shutil.copytree(src, tree, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    cmd = [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation"]
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run = subprocess.run([*cmd, "-w", str(out)], cwd=tree, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def faults(wheel: Path, src: Path = ROOT) -> list[str]:
    """What is wrong with `wheel` against the checkout `src`: anything beside the package, a kit
    module, a missing or changed package module or config."""
    with zipfile.ZipFile(wheel) as z:
        files = {n: z.read(n) for n in z.namelist() if not n.endswith("/")}
    out = [
        f"top level: {top}"
        for top in sorted({n.split("/")[0] for n in files})
        if top != PACKAGE and not (top.startswith(f"{PACKAGE}-") and top.endswith(".dist-info"))
    ]
    kit = {p.name for p in KIT.glob("*.py")} - {"__init__.py"}
    out += [f"kit module: {n}" for n in sorted(files) if n.rsplit("/", 1)[-1] in kit]
    for p in sorted((src / PACKAGE).rglob("*")):
        if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts:
            name = p.relative_to(src).as_posix()
            if files.get(name) != p.read_bytes():
                out.append(f"{'missing' if name not in files else 'differs'}: {name}")
    return out


def test_the_wheel_holds_the_package_and_its_configs_and_no_test_kit(tmp_path):
    wheel = build_wheel(ROOT, tmp_path)
    assert faults(wheel) == []
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "clipo-megatron = clipo_megatron.cli:main" in z.read(entry).decode()
    assert f"{PACKAGE}/configs/clipo.yaml" in names  # the package data, by name as well


def test_the_check_sees_the_kit_shipped_and_the_configs_dropped(tmp_path):
    """The same build with the kit in discovery and no package data: both are reported."""
    src = tmp_path / "broken"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    pyproject = (src / "pyproject.toml").read_text()
    include = 'include = ["clipo_megatron", "clipo_megatron.*"]'
    assert include in pyproject and 'clipo_megatron = ["configs/*.yaml"]' in pyproject
    pyproject = pyproject.replace(include, 'include = ["clipo_megatron*", "clipo_testkit*"]')
    pyproject = pyproject.replace('clipo_megatron = ["configs/*.yaml"]', "")
    (src / "pyproject.toml").write_text(pyproject)
    (tmp_path / "out").mkdir()
    found = faults(build_wheel(src, tmp_path / "out"), src)
    assert "top level: clipo_testkit" in found
    assert "kit module: clipo_testkit/emulated_cuda.py" in found
    assert "missing: clipo_megatron/configs/clipo.yaml" in found
