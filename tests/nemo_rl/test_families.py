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
    "grpo-nanov3-30BA3B-2n8g-megatron-pack-cp.yaml": (
        families.HYBRID,
        [families.MOE, families.MOE_IN_HYBRID],
    ),
    "grpo-nemotron3-super-120BA12B-8n4g-megatron.yaml": (
        families.HYBRID,
        [families.MOE, families.MOE_IN_HYBRID, families.MTP],
    ),
    "grpo-nano-v2-12b-1n8g-megatron.yaml": (families.HYBRID, []),
    "grpo-dapomath17k-dsv3-megatron.yaml": (families.MLA, [families.MOE]),
    "grpo-moonlight-16ba3b-4n8g-megatron-fp8-e2e.yaml": (
        families.MLA,
        [families.MOE, families.FP8],
    ),
    "grpo-qwen3.5-9b-1n8g-megatron.yaml": (families.GATED_DELTANET, []),
    "grpo-qwen3.5-35ba3b-2n8g-megatron-ep16tp2cp2.yaml": (
        families.GATED_DELTANET,
        [families.MOE, families.MOE_IN_GATED_DELTANET],
    ),
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


def _ok_line(overlay: Path, capsys) -> str:
    spec = importlib.util.spec_from_file_location("run", ROOT / "examples/run_grpo_clipo.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    assert cli.main(["--config", str(overlay), "--validate-only", "--no-cluster-env"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    return line


def _overlay(tmp_path: Path, recipe: str) -> Path:
    overlay = tmp_path / "my_recipe.yaml"
    overlay.write_text(f"defaults:\n  - {RECIPES / recipe}\n  - clipo_megatron:clipo.yaml\n")
    return overlay


@needs_recipes
def test_the_ok_line_names_what_clipo_has_not_run_with(nemo_rl_root, tmp_path, capsys):
    line = _ok_line(_overlay(tmp_path, "grpo-moonlight-16ba3b-4n8g-megatron-fp8-e2e.yaml"), capsys)
    assert line.startswith(  # MLA and MoE have run, FP8 training not
        f"preflight OK (accepted; CLIPO has not run with FP8 training: {families.FP8.why_not}): "
    ), line


@needs_recipes
@pytest.mark.parametrize(
    "recipe",  # dense; and hybrid Mamba + MoE in the stack + MTP, each run (the record)
    [
        "grpo-llama3.2-1b-instruct-1n8g-megatron.yaml",
        "grpo-nemotron3-super-120BA12B-8n4g-megatron.yaml",
    ],
)
def test_a_recipe_that_has_run_in_full_gets_the_plain_ok_line(
    nemo_rl_root, tmp_path, capsys, recipe
):
    line = _ok_line(_overlay(tmp_path, recipe), capsys)
    assert line.startswith("preflight OK: "), line


@needs_recipes
def test_the_laptop_ok_line_names_nemo_rls_checks_that_did_not_run(
    nemo_rl_root, tmp_path, capsys, monkeypatch
):
    from clipo_megatron.nemo_rl.guard import preflight

    monkeypatch.setattr(preflight, "nemo_rl_importable", lambda: False)
    line = _ok_line(_overlay(tmp_path, "grpo-llama3.2-1b-instruct-1n8g-megatron.yaml"), capsys)
    assert line.endswith(preflight.SKIPPED_WITHOUT_NEMO_RL), line
    for check in ("version", "seams", "MasterConfig", "NeMo-RL is not importable"):
        assert check in line, check
    assert "scripts/test_nemo_rl.sh --preflight" in line


def test_a_recipe_clipo_has_run_with_keeps_the_plain_ok_line():
    config = {"policy": {"model_name": "Qwen/Qwen2.5-7B-Instruct", "megatron_cfg": {}}}
    assert families.not_run(config) == []
    config["policy"]["megatron_cfg"]["mtp_num_layers"] = 1  # MTP has run (test_hybrid_mtp.py)
    assert families.parts_of(config)[-1] is families.MTP and families.not_run(config) == []
    config["policy"]["megatron_cfg"]["peft"] = {"enabled": True}
    assert families.not_run(config) == [f"LoRA: {families.LORA.why_not}"]


def test_training_cuda_graphs_are_named():
    config = {"policy": {"model_name": "meta-llama/Llama-3.2-1B", "megatron_cfg": {}}}
    for impl in (None, "none"):
        config["policy"]["megatron_cfg"]["cuda_graph_impl"] = impl
        assert families.not_run(config) == []
    config["policy"]["megatron_cfg"]["cuda_graph_impl"] = "local"
    assert families.not_run(config) == [f"training CUDA graphs: {families.CUDA_GRAPHS.why_not}"]


def test_every_part_that_ran_names_a_test_that_exists():
    parts = [p for p, _ in families.FAMILY_RULES + families.FEATURE_RULES] + [families.DENSE]
    for part in parts:
        assert part.ran or part.why_not, part.name
        for test in filter(None, (t.strip() for t in (part.ran_in or "").split(","))):
            path, _, name = test.partition("::")
            assert name, (part.name, test, "path::name")
            source = (ROOT / path).read_text(encoding="utf-8")
            assert f"def {name}(" in source, (part.name, test)


def test_the_docs_table_is_the_record():
    doc = (ROOT / "docs" / "nemo_rl.md").read_text(encoding="utf-8")
    assert families.markdown_table() in doc, (
        "regenerate: python -m clipo_megatron.nemo_rl.guard.families"
    )


@pytest.mark.parametrize(
    ("model", "ep"),
    [("my-org/my-model", 2), ("Qwen/Qwen3-30B-A3B", 1), ("my-org/my-moe", 1)],
)
def test_moe_is_read_from_expert_parallelism_or_the_models_name(model, ep):
    config = {"policy": {"model_name": model, "megatron_cfg": {"expert_model_parallel_size": ep}}}
    assert families.parts_of(config) == [families.DENSE, families.MOE]
    config["policy"]["model_name"], config["policy"]["megatron_cfg"] = "Qwen/Qwen3-8B", {}
    assert families.parts_of(config) == [families.DENSE]
