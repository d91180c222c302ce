# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A NeMo-RL user's overlay mistakes, each one line naming the fix, exit 2, no traceback: the
CLIPO mixin before the recipe, a recipe of another algorithm, a misspelt clipo.* key on the
command line or in the file (`guard/recipe_mistakes.py`, `core/key_names.py`)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "configs" / "track1_qwen3b.yaml"  # a full GRPO recipe, no parents
SNAPSHOT = ROOT.parent / "shared" / "upstream" / "NeMo-RL-7ea279a"
SRC = Path(os.environ.get("NEMO_RL_SRC") or SNAPSHOT)


@pytest.fixture
def preflight(capsys):
    spec = importlib.util.spec_from_file_location("run", ROOT / "examples/run_grpo_clipo.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)

    def run(recipe: Path, *overrides: str, only: bool = True) -> list[str]:
        code = cli.main(
            ["--config", str(recipe), "--validate-only", "--no-cluster-env", *overrides]
        )
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err
        problems = [ln for ln in err.splitlines() if ln.startswith("  - ")]
        assert len(problems) == 1 or not only, err  # `only`: the mistake stops the preflight
        return problems

    return run


def _overlay(tmp_path: Path, *defaults: str, body: str = "") -> Path:
    path = tmp_path / "my_recipe.yaml"
    path.write_text("defaults:\n" + "".join(f"  - {d}\n" for d in defaults) + body)
    return path


def test_the_mixin_before_the_recipe_names_the_order(preflight, tmp_path):
    (line,) = preflight(_overlay(tmp_path, "clipo_megatron:clipo.yaml", str(RECIPE)))
    assert f"lists clipo_megatron:clipo.yaml before {RECIPE}" in line
    assert f"defaults: [{RECIPE}, clipo_megatron:clipo.yaml]" in line


@pytest.mark.skipif(
    not (SRC / "examples" / "configs" / "sft.yaml").is_file(),
    reason=f"needs NeMo-RL's sft.yaml: set NEMO_RL_SRC or lay the 7ea279a source at {SNAPSHOT}",
)
def test_an_sft_recipe_is_not_a_grpo_recipe(preflight, tmp_path):
    overlay = _overlay(
        tmp_path, str(SRC / "examples/configs/sft.yaml"), "clipo_megatron:clipo.yaml"
    )
    (line,) = preflight(overlay)
    assert "not a GRPO recipe (an SFT recipe" in line and "Interpolation" not in line


def test_a_misspelt_key_on_the_command_line_names_the_key_meant(preflight):
    (line,) = preflight(RECIPE, "clipo.method.temprature=0.02")
    assert "did you mean clipo.method.temperature?" in line


def test_a_misspelt_key_in_the_file_names_the_key_meant(preflight, tmp_path):
    body = "clipo:\n  method:\n    temprature: 0.02\n"
    line = preflight(_overlay(tmp_path, str(RECIPE), body=body), only=False)[0]  # data lines follow
    assert "unknown keys clipo.method.temprature (did you mean clipo.method.temperature?)" in line
