# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The docs' quick commands work as written, and the data folder has one default (issue 31,
item 6): `DRY_RUN=1 CONTAINER=img bash slurm/track2_qwen7b.sh` from docs/slurm.md failed in a
fresh checkout, the scripts' default data folder being absent there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *(ROOT / "slurm").glob("*.sh")]
DRY_RUN = re.compile(r"(DRY_RUN=1 CONTAINER=img bash slurm/\S+\.sh)")


def _documented_dry_runs() -> list[str]:
    found = {m.group(1) for p in DOCS for m in DRY_RUN.finditer(p.read_text())}
    return sorted(found)


def test_the_docs_name_dry_runs():
    assert "DRY_RUN=1 CONTAINER=img bash slurm/track2_qwen7b.sh" in _documented_dry_runs()


@pytest.mark.parametrize("command", _documented_dry_runs())
def test_a_documented_dry_run_works_as_written(command, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLIPO_", "SLURM_"))}
    env["HOME"] = str(tmp_path)
    # the recipe is read with python3 from PATH, as in a shell with the project's venv activated
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    out = subprocess.run(
        ["bash", "-c", command], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("srun ") >= 2  # the preflight and the head step, printed
    assert not (ROOT / "slurm-logs").exists()  # a dry run writes nothing


def test_one_default_data_folder_in_scripts_recipes_and_preflight(monkeypatch):
    from clipo_megatron.nemo_rl.guard.preflight import check_cluster_env

    monkeypatch.delenv("CLIPO_DATA_DIR", raising=False)
    recipes = (ROOT / "examples" / "configs").rglob("*.yaml")
    fallbacks = {
        m.group(1)
        for p in recipes
        for m in re.finditer(r"\$\{oc\.env:CLIPO_DATA_DIR,([^}]+)\}", p.read_text())
    }
    script = re.search(
        r'CLIPO_DATA_DIR="\$\{CLIPO_DATA_DIR:-\$CLIPO_ROOT/([^}]+)\}"',
        (ROOT / "slurm" / "recipe.sh").read_text(),
    )
    assert fallbacks == {"data/clipo"} and script and script.group(1) == "data/clipo"
    _, warnings = check_cluster_env({}, has_nemo_rl=True)
    assert any("fall back to data/clipo under the working directory" in w for w in warnings)
