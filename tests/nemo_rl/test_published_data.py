# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The authors' data folder exactly as published (Qwen-Applications/CLIPO `data/`, whose doubled
sets are `test/theoremqa*2.parquet` and `test/truthfulqa*2.parquet`) works for the reproduction
recipes' preflight and for `eval`'s loader; a copy renamed without `*2` still does.

Before: the recipes and the registry named only `theoremqa.parquet` / `truthfulqa.parquet`, so the
published folder failed the preflight with "does not exist" for both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clipo_megatron.data.loader import load_dataset
from clipo_megatron.nemo_rl.guard import preflight as pf

ROOT = Path(__file__).resolve().parents[2]
REPRODUCE = ROOT / "examples" / "configs" / "reproduce"
SHARED = ROOT.parent / "shared" / "data" / "clipo"
needs_shared = pytest.mark.skipif(
    not (SHARED / "test" / "theoremqa.parquet").is_file(),
    reason=f"needs the shared data at {SHARED}",
)
PUBLISHED = {"test/theoremqa.parquet": "test/theoremqa*2.parquet",
             "test/truthfulqa.parquet": "test/truthfulqa*2.parquet"}  # fmt: skip


def _folder(root: Path, published: bool) -> Path:
    """The shared data as links, the two doubled sets under their published names if asked."""
    for f in SHARED.rglob("*.parquet"):
        rel = str(f.relative_to(SHARED))
        dst = root / (PUBLISHED.get(rel, rel) if published else rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.symlink_to(f)
    return root


@needs_shared
@pytest.mark.parametrize("published", [True, False], ids=["as-published", "renamed"])
@pytest.mark.parametrize("recipe", ["track1_grpo_clipo.yaml"])  # the others inherit its data
def test_the_reproduction_recipes_pass_the_preflight(recipe, published, tmp_path, monkeypatch):
    data = _folder(tmp_path / "data", published)
    monkeypatch.setenv("CLIPO_DATA_DIR", str(data))
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)
    report = pf.preflight(REPRODUCE / recipe, cluster_env=False)
    assert report.problems == []
    paths = [v["data_path"] for v in report.config["data"]["validation"]]
    want = "theoremqa*2.parquet" if published else "theoremqa.parquet"
    assert str(data / "test" / want) in paths


@needs_shared
@pytest.mark.parametrize("name, rows", [("theoremqa", 1494), ("truthfulqa", 1634)])
def test_eval_loads_the_published_names(name, rows, tmp_path):
    data = _folder(tmp_path / "data", published=True)
    assert len(load_dataset(name, data_dir=data)) == rows


def test_the_published_name_comes_first(tmp_path):
    from clipo_megatron.data.loader import verl_path

    (tmp_path / "test").mkdir()
    assert verl_path("tqa", tmp_path) == tmp_path / "test" / "truthfulqa*2.parquet"  # neither
    (tmp_path / "test" / "truthfulqa.parquet").touch()
    assert verl_path("tqa", tmp_path) == tmp_path / "test" / "truthfulqa.parquet"
    (tmp_path / "test" / "truthfulqa*2.parquet").touch()
    assert verl_path("tqa", tmp_path) == tmp_path / "test" / "truthfulqa*2.parquet"  # both
