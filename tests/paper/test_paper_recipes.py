# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A recipe for every printed row: generated from paper_scores.json, committed, and each one
passes the preflight with the settings of its rows."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from clipo_megatron.paper.recipes import (
    GENERATED,
    REPRODUCE,
    generated_recipes,
    recipe_settings,
    stale_recipes,
    write_recipes,
)
from clipo_megatron.paper.scores import MODELS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "clipo"
needs_data = pytest.mark.skipif(
    not (DATA / "train" / "gsm8k.parquet").is_file(),
    reason=f"needs the authors' parquet at {DATA} (missing)",
)
SETTINGS = recipe_settings()


@pytest.fixture(scope="module")
def cached_row_keys():
    """The preflight's train / validation overlap check reads the same parquet files for every
    recipe of a track (2 s a recipe): read each once for this module."""
    from clipo_megatron.nemo_rl.guard import preflight_data

    mp = pytest.MonkeyPatch()
    mp.setattr(preflight_data, "_row_keys", lru_cache(maxsize=None)(preflight_data._row_keys))
    yield
    mp.undo()


def test_the_committed_recipes_are_the_generated_ones(tmp_path):
    assert stale_recipes() == [], "run `python -m clipo_megatron.paper recipes`"
    # regenerating from nothing gives the committed files, byte for byte
    assert sorted(write_recipes(tmp_path)) == sorted(generated_recipes())
    for name, text in generated_recipes().items():
        assert (REPRODUCE / name).read_text(encoding="utf-8") == text


def test_a_hand_edit_and_a_stale_file_are_found(tmp_path):
    write_recipes(tmp_path)
    name = sorted(generated_recipes())[0]
    (tmp_path / name).write_text((tmp_path / name).read_text() + "grpo: {seed: 1}\n")
    (tmp_path / "track1_old.yaml").write_text(GENERATED)
    (tmp_path / "hand_written.yaml").write_text("defaults: x.yaml\n")
    assert stale_recipes(tmp_path) == sorted([name, "track1_old.yaml"])
    write_recipes(tmp_path)
    assert stale_recipes(tmp_path) == [] and (tmp_path / "hand_written.yaml").is_file()


def test_every_reproduction_recipe_is_a_rows():
    """No recipe in reproduce/ that no printed row runs (the objectives/ mixins aside)."""
    assert {p.stem for p in REPRODUCE.glob("*.yaml")} == set(SETTINGS)


@needs_data
@pytest.mark.parametrize("stem", sorted(SETTINGS))
def test_each_rows_recipe_passes_the_preflight_with_its_settings(
    stem, monkeypatch, cached_row_keys
):
    from clipo_megatron.nemo_rl.config import validate_master_config
    from clipo_megatron.nemo_rl.guard import preflight as pf

    monkeypatch.setenv("CLIPO_DATA_DIR", str(DATA))
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)
    report = pf.preflight(REPRODUCE / f"{stem}.yaml", cluster_env=False)
    assert report.problems == []
    s, cfg = SETTINGS[stem], report.config
    clipo = validate_master_config(cfg)
    assert clipo.enabled == s.clipo and clipo.objective == s.objective
    assert cfg["policy"]["model_name"] == MODELS[s.model][0]
    g = cfg["grpo"]["num_generations_per_prompt"]
    assert g == s.group_size == clipo.method.max_group_size
    # every rollout of a Track II step in one PPO mini-batch, two on Track I (the roots' ratio)
    updates = {"track1": 2, "track2": 1}[s.track]
    assert (
        cfg["grpo"]["num_prompts_per_step"] * g
        == updates * cfg["policy"]["train_global_batch_size"]
    )
    assert cfg["checkpointing"]["checkpoint_dir"] == f"results/reproduce/{stem}"
    if s.clipo:
        m = clipo.method
        assert (m.loss_type, m.temperature, m.fixed_head) == (s.loss, s.tau, s.fixed_head)
        assert m.lam == (1.0 if s.loss == "softnn" else 0.2)  # Sec. 4.1's lambda per loss
