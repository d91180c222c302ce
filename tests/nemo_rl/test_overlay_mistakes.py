# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A NeMo-RL user's overlay mistakes, each one problem line naming the fix, exit 2, no traceback
(issue 51): the CLIPO mixin before the recipe (was the leave-one-out refusal), a recipe of
another algorithm (was `InterpolationKeyError: grpo.num_generations_per_prompt`), a misspelt
clipo.* key on the command line (was "write +... to add it") or in the file (was every valid
key). `guard/recipe_mistakes.py`, `core/key_names.py`."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "configs" / "track1_qwen3b.yaml"  # a full GRPO recipe, no parents
SNAPSHOT = ROOT.parent / "shared" / "upstream" / "NeMo-RL-7ea279a"
SRC = Path(os.environ.get("NEMO_RL_SRC") or SNAPSHOT)
MIXIN = "clipo_megatron:clipo.yaml"
SFT = "nemo_rl:examples/configs/recipes/llm/sft-llama3.1-8b-1n8g-megatron-lora.yaml"
GRPO = "nemo_rl:examples/configs/recipes/llm/grpo-qwen3-30ba3b-8n8g-megatron.yaml"  # the guide's
needs_nemo_rl = pytest.mark.skipif(
    not (SRC / "examples" / "configs" / "recipes" / "llm").is_dir(),
    reason=f"needs NeMo-RL's recipes: set NEMO_RL_SRC or lay the 7ea279a source at {SNAPSHOT}",
)


@pytest.fixture
def preflight(capsys, monkeypatch):
    monkeypatch.setenv("NEMO_RL_ROOT", str(SRC))
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


def _overlay(tmp_path: Path, *defaults: str, body: str = "", name: str = "my_recipe") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text("defaults:\n" + "".join(f"  - {d}\n" for d in defaults) + body)
    return path


def test_the_mixin_before_the_recipe_names_the_order_and_the_fix(preflight, tmp_path):
    # a recipe with NeMo-RL's default leave-one-out baseline on, which the mixin turns off
    recipe = _overlay(tmp_path, str(RECIPE), body="grpo:\n  use_leave_one_out_baseline: true\n")
    (line,) = preflight(_overlay(tmp_path, MIXIN, str(recipe), name="overlay"))
    assert f"lists {MIXIN} before {recipe}" in line and "leave_one_out_baseline=true" in line
    assert f"the mixin must come after the recipe: defaults: [{recipe}, {MIXIN}]" in line


def test_the_mixin_before_a_recipe_that_keeps_its_settings_is_not_refused(tmp_path):
    from clipo_megatron.nemo_rl.guard.recipe_mistakes import overlay_mistake

    # track1 sets the leave-one-out baseline off itself: the order changes nothing
    assert overlay_mistake(_overlay(tmp_path, MIXIN, str(RECIPE)), []) is None


@needs_nemo_rl
def test_the_mixin_before_a_nemo_rl_recipe_names_the_order(preflight, tmp_path):
    (line,) = preflight(_overlay(tmp_path, MIXIN, GRPO))
    assert f"defaults: lists {MIXIN} before {GRPO}" in line
    assert f"defaults: [{GRPO}, {MIXIN}]" in line and "leave-one-out std" not in line


@needs_nemo_rl
def test_an_sft_recipe_is_not_a_grpo_recipe(preflight, tmp_path):
    (line,) = preflight(_overlay(tmp_path, SFT, MIXIN))
    assert f"{SFT} is not a GRPO recipe (an SFT recipe: no grpo.num_generations_per_prompt)" in line
    assert "e.g. nemo_rl:examples/configs/grpo_math_1B_megatron.yaml" in line
    assert "Interpolation" not in line


@needs_nemo_rl
def test_the_guides_overlay_passes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NEMO_RL_ROOT", str(SRC))
    from clipo_megatron.nemo_rl.guard.preflight import preflight

    report = preflight(_overlay(tmp_path, GRPO, MIXIN), cluster_env=False)
    assert report.ok, report.problems


def test_a_misspelt_key_on_the_command_line_names_the_key_meant(preflight):
    (line,) = preflight(RECIPE, "clipo.method.temprature=0.02")
    assert line == (
        "  - override clipo.method.temprature=0.02: clipo.method.temprature is not in the recipe; "
        "did you mean clipo.method.temperature? (+clipo.method.temprature=0.02 would add it as a "
        "new key)"
    )


def test_a_misspelt_key_in_the_file_names_the_key_meant(preflight, tmp_path):
    body = "clipo:\n  method:\n    temprature: 0.02\n"
    line = preflight(_overlay(tmp_path, str(RECIPE), body=body), only=False)[0]  # data lines follow
    assert (
        line == "  - unknown key clipo.method.temprature (did you mean clipo.method.temperature?)"
    )
