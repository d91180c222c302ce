# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The port (`clipo_megatron/nemo_rl/port/`): every supported NeMo-RL is one module of
`port/versions/`, found by listing that folder, and named nowhere else in the product but one file;
a new module there is a supported version for the identification, the seam table and the install
hint, and a module that leaves out what a version must declare fails at import naming it."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.port import compat, seams, versions
from clipo_megatron.nemo_rl.port.loops import SUPPORTED as LOOPS
from clipo_megatron.nemo_rl.port.version import VERSION_MODULE_NAMES, Probes

PACKAGE = Path(__file__).resolve().parents[2] / "clipo_megatron"
VERSIONS_DIR = PACKAGE / "nemo_rl" / "port" / "versions"


def _files_naming(pattern: str) -> list[str]:
    return sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if re.search(pattern, p.read_text(encoding="utf-8"))
    )


@pytest.mark.parametrize("version", versions.SUPPORTED, ids=lambda v: v.NAME)
def test_each_versions_commit_is_named_in_at_most_two_product_files(version):
    """Its tag or commit (the short sha) is in its own module and at most one other file."""
    tokens = {re.escape(version.COMMIT[:7])}
    if not version.NAME.startswith("main@"):
        tokens.add(re.escape(version.NAME) + r"\b")  # a release's tag names its commit
    named = _files_naming("|".join(sorted(tokens)))
    own = f"nemo_rl/port/versions/{Path(version.__file__).name}"
    assert own in named, named
    assert len(named) <= 2, f"{version.NAME} is named in {named}: name it in its version module"


def test_the_supported_versions_are_the_modules_of_the_folder():
    listed = sorted(p.stem for p in VERSIONS_DIR.glob("*.py") if p.stem != "__init__")
    assert sorted(Path(v.__file__).stem for v in versions.SUPPORTED) == listed
    assert [v.DATE for v in versions.SUPPORTED] == sorted(v.DATE for v in versions.SUPPORTED)
    for v in versions.SUPPORTED:
        assert re.fullmatch(r"[0-9a-f]{40}", v.COMMIT) and isinstance(v.PROBES, Probes)
        for loop in LOOPS:  # each owns a seam table and the names it rebinds, per loop
            assert v.seams(loop.name) and v.rebindings(loop.name)
    assert set(compat.COMMITS) == set(versions.names()) == set(compat.SUPPORTED)


NEW = """
from clipo_megatron.nemo_rl.port.version import Probes

NAME = "v9.9.9"
COMMIT = "{commit}"
PACKAGE_VERSION = "9.9.9"
DATE = "2099-01-01"
PROBES = Probes(metric_normalizer=True, rank0_tokenizer_save=True)
COMMITLESS_CAVEAT = None


def rebindings(loop):
    from clipo_megatron.nemo_rl.port.seams import rebindings_of

    return rebindings_of(loop)


def seams(loop=None):
    from clipo_megatron.nemo_rl.port.seams import seams_of

    return seams_of(loop)
"""


@pytest.fixture
def folder_with(tmp_path, monkeypatch):
    """`versions/`'s modules plus the text given, as another module of that folder."""

    def make(text: str) -> None:
        for p in VERSIONS_DIR.glob("*.py"):
            (tmp_path / p.name).write_text(p.read_text())
        (tmp_path / "v9_9_9.py").write_text(text)
        monkeypatch.setattr(versions, "__path__", [str(tmp_path)])
        for name in [m for m in sys.modules if m.startswith(versions.__name__ + ".")]:
            monkeypatch.delitem(sys.modules, name)

    return make


def test_a_new_module_is_a_supported_version(folder_with, monkeypatch):
    commit = "9" * 40
    folder_with(NEW.format(commit=commit))
    monkeypatch.setattr(versions, "SUPPORTED", versions._discover())
    assert versions.newest().NAME == "v9.9.9" and "v9.9.9" in versions.names()
    probes = Probes(metric_normalizer=True, rank0_tokenizer_save=True)
    assert compat.identify("9.9.9", commit[:9], probes)[0] == "v9.9.9"
    assert compat.identify("9.9.9", None, probes)[0] == "v9.9.9"
    assert seams.seam_list(LOOPS[0])[0].startswith("NeMo-RL v9.9.9 (999999999)")


def test_a_version_module_missing_a_name_fails_at_import_naming_it(folder_with, monkeypatch):
    folder_with(NEW.format(commit="9" * 40).replace('DATE = "2099-01-01"\n', ""))
    with pytest.raises(ImportError, match=r"v9_9_9 defines no DATE \(version.py\)"):
        versions._discover()
    assert "DATE" in VERSION_MODULE_NAMES


def test_the_install_hint_names_the_newest_version():
    install = importlib.import_module("clipo_megatron.nemo_rl.port.install")
    assert f"git checkout {versions.newest().COMMIT[:9]}" in install.INSTALL_HINT
    assert all(name in install.INSTALL_HINT for name in versions.names())


# Modules that implement a protocol NeMo-RL declares for extensions (its loss, environment and
# data-processor interfaces and registries) import it where they implement it; the rest of the
# integration reaches NeMo-RL through the port.
PROTOCOL_MODULES = {"loss_functions.py", "data.py", "environment.py"}


def nemo_rl_imports_outside_the_port(root: Path = PACKAGE / "nemo_rl") -> list[str]:
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("port/") or rel in PROTOCOL_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [f"{rel}:{node.lineno} {n}" for n in names if n.split(".")[0] == "nemo_rl"]
    return found


def test_the_driver_policy_worker_and_guard_reach_nemo_rl_only_through_the_port(tmp_path):
    assert nemo_rl_imports_outside_the_port() == []
    (tmp_path / "driver.py").write_text("def f():\n    from nemo_rl.algorithms import grpo\n")
    assert nemo_rl_imports_outside_the_port(tmp_path) == ["driver.py:2 nemo_rl.algorithms"]
