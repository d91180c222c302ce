# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Accepted is not "has run": each NeMo-RL recipe's model family and features, read from the recipe
alone, and the preflight's OK line naming those CLIPO has not run with (`guard/families.py`)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.guard import families
from clipo_megatron.nemo_rl.guard.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT.parent / "shared" / "upstream" / "NeMo-RL-7ea279a"
SRC = Path(os.environ.get("NEMO_RL_SRC") or SNAPSHOT)
RECIPES = SRC / "examples" / "configs" / "recipes" / "llm"
needs_recipes = pytest.mark.skipif(
    not RECIPES.is_dir(),
    reason=f"needs NeMo-RL's recipes: set NEMO_RL_SRC or lay the 7ea279a source at {SNAPSHOT}",
)

CASES = {  # recipe -> (family, features)
    "grpo-nanov3-30BA3B-2n8g-megatron-pack-cp.yaml": (families.HYBRID, [families.MOE]),
    "grpo-nemotron3-super-120BA12B-8n4g-megatron.yaml": (
        families.HYBRID,
        [families.MOE, families.MTP],
    ),
    "grpo-nano-v2-12b-1n8g-megatron.yaml": (families.HYBRID, []),
    "grpo-dapomath17k-dsv3-megatron.yaml": (families.MLA, [families.MOE]),
    "grpo-moonlight-16ba3b-4n8g-megatron-fp8-e2e.yaml": (
        families.MLA,
        [families.MOE, families.FP8],
    ),
    "grpo-qwen3.5-9b-1n8g-megatron.yaml": (families.GATED_DELTANET, []),
    "grpo-gptoss-20b-8n8g-megatron.yaml": (families.GPT_OSS, [families.MOE]),
    "grpo-qwen3-30ba3b-8n8g-megatron.yaml": (families.DENSE, [families.MOE]),
    "grpo-llama3.2-1b-instruct-1n8g-megatron.yaml": (families.DENSE, []),
    "grpo-qwen3-8b-base-1n8g-megatron-lora.yaml": (families.DENSE, [families.LORA]),
    "grpo-qwen3-1.7b-1n8g-megatron-eagle3.yaml": (families.DENSE, [families.EAGLE3]),
    "grpo-llama3.2-1b-instruct-1n8g-megatron_generation.yaml": (
        families.DENSE,
        [families.MEGATRON_GENERATION],
    ),
}


@pytest.fixture(scope="module")
def nemo_rl_root(tmp_path_factory):
    old = {k: os.environ.get(k) for k in ("NEMO_RL_ROOT", "HF_HOME")}
    os.environ["NEMO_RL_ROOT"] = str(SRC)
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf_home"))
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@needs_recipes
@pytest.mark.parametrize("recipe", sorted(CASES))
def test_each_family_and_feature_is_read_from_the_recipe(nemo_rl_root, recipe):
    family, features = CASES[recipe]
    config = load_recipe(RECIPES / recipe)
    assert families.parts_of(config) == [family, *features]


@needs_recipes
def test_the_ok_line_names_what_clipo_has_not_run_with(nemo_rl_root, tmp_path, capsys):
    overlay = tmp_path / "my_recipe.yaml"
    overlay.write_text(
        f"defaults:\n  - {RECIPES / 'grpo-nemotron3-super-120BA12B-8n4g-megatron.yaml'}\n"
        "  - clipo_megatron:clipo.yaml\n"
    )
    spec = importlib.util.spec_from_file_location("run", ROOT / "examples/run_grpo_clipo.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    assert cli.main(["--config", str(overlay), "--validate-only", "--no-cluster-env"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(
        "preflight OK (accepted; CLIPO has not run with hybrid Mamba (Nemotron-H / Nemotron 3): "
    )
    assert "; MTP: " in line and "MoE" not in line.split("):")[0]  # MoE has run: not named
    if importlib.util.find_spec("nemo_rl") is None:  # the laptop: NeMo-RL's checks said skipped
        assert line.endswith(families_skipped())


def families_skipped() -> str:
    from clipo_megatron.nemo_rl.guard.preflight import SKIPPED_WITHOUT_NEMO_RL

    return SKIPPED_WITHOUT_NEMO_RL


def test_a_recipe_clipo_has_run_with_keeps_the_plain_ok_line():
    config = {"policy": {"model_name": "Qwen/Qwen2.5-7B-Instruct", "megatron_cfg": {}}}
    assert families.not_run(config) == []
    config["policy"]["megatron_cfg"]["mtp_num_layers"] = 1
    assert families.not_run(config) == [f"MTP: {families.MTP.why_not}"]


def test_every_part_that_ran_names_a_test_that_exists():
    parts = [p for p, _ in families.FAMILY_RULES + families.FEATURE_RULES] + [families.DENSE]
    for part in parts:
        assert part.ran or part.why_not, part.name
        for test in (part.ran_in or "").split(","):
            assert not test or (ROOT / test.strip()).is_file(), (part.name, test)
