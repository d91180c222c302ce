# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every recipe loads and passes `--validate-only` under NeMo-RL's pinned libraries.

scripts/test.sh runs this file in `.venv_pinned` (omegaconf 2.3.1, hydra-core 1.3.2, pydantic,
ray, transformers at NeMo-RL's uv.lock versions) with CLIPO_PINNED_LEG=1; it is marker-free and
also passes in the normal venv. The project venv has omegaconf 2.4, where the legacy-resolver
failure of NeMo-RL's environment cannot show, hence the leg.

NeMo-RL's parent recipe is merged from $NEMO_RL_ROOT / $NEMO_RL_SRC when set (or the importable
NeMo-RL checkout); otherwise from a stand-in written here with the same constructs (nested
`${mul:${a}, ${b}}`, a 5 % validation split, a `defaults:` chain). Nothing from NeMo-RL is copied into the project.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.guard.recipes import nemo_rl_root

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "configs"
DATA = ROOT.parent / "shared" / "data" / "clipo"
RECIPES = sorted(
    p
    for p in CONFIGS.rglob("*.yaml")
    if p.parent.name != "objectives" and p.name != "cpu_demo.yaml"  # the CPU runner's config
)
needs_data = pytest.mark.skipif(
    not (DATA / "train" / "gsm8k.parquet").is_file(),
    reason=f"needs the authors' parquet at {DATA} (missing)",
)

# A stand-in for NeMo-RL's grpo_math_1B.yaml <- grpo_math_1B_megatron.yaml, with the constructs
# that broke: nested resolvers (legacy resolver API on omegaconf 2.3), a 5 % validation split.
PARENT = """\
policy:
  max_total_sequence_length: 512
  logprob_batch_size: 2
  train_micro_batch_size: 2
  make_sequence_length_divisible_by: ${policy.megatron_cfg.tensor_model_parallel_size}
  sequence_packing:
    enabled: false
    train_mb_tokens: ${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}
    logprob_mb_tokens: ${mul:${policy.max_total_sequence_length}, ${policy.logprob_batch_size}}
  megatron_cfg:
    enabled: false
    tensor_model_parallel_size: 1
    optimizer:
      lr: 5.0e-6
      max_lr: ${max:${policy.megatron_cfg.optimizer.lr}, 1.0e-7}
data:
  max_input_seq_length: ${policy.max_total_sequence_length}
  train:
    dataset_name: OpenMathInstruct-2
    split_validation_size: 0.05
    seed: ${grpo.seed}
  validation: null
  default:
    prompt_file: examples/prompts/cot.txt
    processor: math_hf_data_processor
grpo:
  seed: 42
"""


@pytest.fixture
def nemo_rl_parent(tmp_path, monkeypatch):
    """NEMO_RL_ROOT for the recipes' `nemo_rl:` parent: the real checkout or the stand-in."""
    real = os.environ.get("NEMO_RL_ROOT") or os.environ.get("NEMO_RL_SRC") or nemo_rl_root()
    if real:  # an importable NeMo-RL checkout also gets its MasterConfig checked: its own parent
        monkeypatch.setenv("NEMO_RL_ROOT", real)
        return Path(real)
    base = tmp_path / "examples" / "configs"
    base.mkdir(parents=True)
    (base / "grpo_math_1B.yaml").write_text(PARENT)
    (base / "grpo_math_1B_megatron.yaml").write_text(
        "defaults: grpo_math_1B.yaml\npolicy:\n  megatron_cfg:\n    enabled: true\n"
    )
    monkeypatch.setenv("NEMO_RL_ROOT", str(tmp_path))
    return None


def _validate_only(recipe: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_grpo_clipo.py"), "--config", str(recipe)]
        + ["--validate-only", "--no-cluster-env", *extra],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "CLIPO_DATA_DIR": str(DATA)},
    )


def test_pinned_leg_runs_nemo_rls_omegaconf():
    """In the pinned leg the installed omegaconf must be NeMo-RL's 2.3.x (hydra-core < 2.4)."""
    import omegaconf

    if os.environ.get("CLIPO_PINNED_LEG") != "1":
        pytest.skip(
            f"not the pinned leg (omegaconf {omegaconf.__version__}; CLIPO_PINNED_LEG unset)"
        )
    assert omegaconf.__version__.startswith("2.3."), omegaconf.__version__
    from importlib.metadata import version

    assert version("hydra-core") == "1.3.2" and version("pydantic") == "2.13.4"


@needs_data
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_recipe_passes_validate_only(recipe, monkeypatch):
    from clipo_megatron.nemo_rl.guard import preflight as pf

    monkeypatch.setenv("CLIPO_DATA_DIR", str(DATA))
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)  # the real one: test below
    report = pf.preflight(recipe, cluster_env=False)
    assert report.problems == []
    assert report.config["data"]["train"]["split_validation_size"] == 0


@needs_data
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_recipe_with_nemo_rls_parent(recipe, nemo_rl_parent, monkeypatch):
    from clipo_megatron.nemo_rl.guard import preflight as pf

    monkeypatch.setenv("CLIPO_DATA_DIR", str(DATA))
    report = pf.preflight(recipe, cluster_env=False)
    assert report.problems == []
    cfg = report.config
    p = cfg["policy"]
    assert p["sequence_packing"]["logprob_mb_tokens"] == (
        p["max_total_sequence_length"] * p["logprob_batch_size"]
    )  # the nested ${mul:...} resolved
    assert cfg["data"]["train"]["split_validation_size"] == 0  # the parent's 0.05 overridden
    assert cfg["data"]["default"]["input_key"] == "prompt"
    if nemo_rl_parent is None:
        assert cfg["policy"]["megatron_cfg"]["optimizer"]["max_lr"] == 1.0e-6  # ${max:...}


@needs_data
def test_cli_validate_only_in_this_interpreter():
    """The real entry point, once, as a subprocess: exit 0 and the resolved config on stdout."""
    out = _validate_only(
        CONFIGS / "scaling" / "qwen32b_tp8_pp2.yaml", "--verbose", "grpo.max_num_steps=100"
    )
    assert out.returncode == 0, out.stderr
    assert '"make_sequence_length_divisible_by": 32' in out.stdout
    assert '"max_num_steps": 100' in out.stdout and "Traceback" not in out.stderr


# ----------------------------------------------------------------------------- reproduction

REPRO = CONFIGS / "reproduce"
# What a reproduction recipe changes against the recommended one of its track (docs/reproduce.md
# has a row for each; run/output dirs aside): the authors' grader, their eps, verl's warm-up
# count, verl's KL gradient, their epochs (Track II) and their validation (every set, their
# period, before training).
AUTHORS_RUN = {"clipo.grader", "clipo.method.log_eps", "clipo.method.warmup_steps"}
AUTHORS_RUN |= {"loss_fn.kl_gradient", "clipo.drop_overlong_prompts", "clipo.pool_last_token"}
THEIR_VALIDATION = {"data.validation", "grpo.max_val_samples", "grpo.val_at_start"}
THEIR_VALIDATION |= {"grpo.val_period"}
REPRO_DIFFS = {
    "track1": AUTHORS_RUN | THEIR_VALIDATION,
    "track2": AUTHORS_RUN | THEIR_VALIDATION | {"grpo.max_num_epochs"},
}
RECOMMENDED = {"track1": "track1_qwen3b.yaml", "track2": "track2_qwen7b.yaml"}
# track -> (epochs, head-only steps, validation period, validation sets)
THEIR_SCHEDULE = {"track1": (6, 13, 7, 8), "track2": (10, 57, 29, 6)}


def _flat(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flat(v, key))
        else:
            out[key] = v
    return out


def _recipe(path: Path) -> dict:
    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    return load_recipe(path)


@needs_data
@pytest.mark.parametrize("track", ["track1", "track2"])
def test_reproduction_differs_from_the_recommended_recipe_only_where_documented(track, monkeypatch):
    monkeypatch.setenv("CLIPO_DATA_DIR", str(DATA))
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    rec = _flat(_recipe(CONFIGS / RECOMMENDED[track]))
    rep = _flat(_recipe(REPRO / f"{track}_grpo_clipo.yaml"))
    diff = {k for k in set(rec) | set(rep) if rec.get(k, "<absent>") != rep.get(k, "<absent>")}
    diff = {k.split(".data_path")[0].split(".processor")[0] for k in diff}
    diff = {"data.validation" if k.startswith("data.validation") else k for k in diff}
    assert diff - {"checkpointing.checkpoint_dir", "logger.log_dir"} == REPRO_DIFFS[track]
    doc = (ROOT / "docs" / "reproduce.md").read_text()
    missing = [k for k in sorted(REPRO_DIFFS[track]) if f"`{k}`" not in doc]
    assert not missing, f"docs/reproduce.md has no row for {missing}"


REPRO_RECIPES = sorted(p for p in REPRO.glob("*.yaml"))


@needs_data
@pytest.mark.parametrize("recipe", REPRO_RECIPES, ids=lambda p: p.stem)
def test_reproduction_recipes_are_the_authors_runs(recipe, monkeypatch):
    """Grader, eps, schedule, validation, tau and DAPO as the authors' scripts ran them."""
    from clipo_megatron.nemo_rl.config import validate_master_config

    monkeypatch.setenv("CLIPO_DATA_DIR", str(DATA))
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    cfg = _recipe(recipe)
    clipo = validate_master_config(cfg)
    track = recipe.stem.split("_")[0]
    epochs, warmup, period, sets = THEIR_SCHEDULE[track]
    assert clipo.grader == "paper" and clipo.method.log_eps == 1e-8
    assert cfg["loss_fn"]["kl_gradient"] == "k3"  # verl's low_var_kl
    assert clipo.drop_overlong_prompts  # verl's filter_overlong_prompts
    assert clipo.pool_last_token is False  # their SGLang states: y1..y(T-1)
    assert clipo.method.warmup_steps == warmup and cfg["grpo"]["max_num_epochs"] == epochs
    assert cfg["grpo"]["val_period"] == period and len(cfg["data"]["validation"]) == sets
    assert cfg["grpo"]["val_at_start"] and cfg["grpo"]["val_at_end"]
    assert cfg["grpo"]["use_dynamic_sampling"] is False  # their trainer has none (DAPO included)
    assert clipo.policy_objective().dynamic_sampling is False
    # the paper's row it runs (tau, CLIPO, objective, model, loss, G):
    # tests/paper/test_paper_recipes.py


@needs_data
def test_print_config_shows_the_authors_knobs(tmp_path):
    """`--validate-only --print-config` of a reproduction recipe: verl's KL gradient, its prompt
    filter and the authors' pooled positions in the resolved config, the filter in the OK line (the tokenizer is not cached here,
    so the line says the count is left to the run; test_prompt_filter.py checks the count)."""
    import json

    out_file = tmp_path / "resolved.json"
    out = _validate_only(REPRO / "track2_grpo_clipo.yaml", "--print-config", str(out_file))
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out_file.read_text())
    assert resolved["config"]["loss_fn"]["kl_gradient"] == "k3"
    assert resolved["clipo"]["drop_overlong_prompts"] is True
    assert resolved["clipo"]["pool_last_token"] is False
    assert resolved["config"]["data"]["max_input_seq_length"] == 512
    assert "prompts over 512 tokens are dropped" in out.stdout.splitlines()[-1]


@needs_data
def test_the_preflight_counts_the_authors_math_file(monkeypatch):
    """With a tokenizer (here one token per character of the templated prompt), the preflight
    counts the rows of math75 over 512 tokens, as a direct count of the file gives."""
    import pyarrow.parquet as pq

    from clipo_megatron.nemo_rl.guard import preflight as pf
    from clipo_megatron.nemo_rl.guard import prompt_count
    from tests.nemo_rl.test_data import _Tok

    monkeypatch.setenv("CLIPO_DATA_DIR", str(DATA))
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)
    monkeypatch.setattr(prompt_count, "load_tokenizer", lambda name: _Tok())
    report = pf.preflight(REPRO / "track2_grpo_clipo.yaml", cluster_env=False)
    prompts = pq.read_table(DATA / "train" / "math75.parquet").column("prompt").to_pylist()
    over = sum(len("<u>" + p[-1]["content"] + "<a>") > 512 for p in prompts)
    assert 0 < over < len(prompts) == 7500
    assert report.prompt_filter == f"dropped {over} of 7500 prompts over 512 tokens"


@needs_data
@pytest.mark.parametrize(
    "recipe",
    [p for p in RECIPES if p.parent.name != "reproduce"],
    ids=lambda p: str(p.relative_to(CONFIGS)),
)
def test_recommended_recipes_keep_the_projects_settings(recipe, monkeypatch):
    """Outside reproduce/: math-verify, no eps, the recipes' own warm-up."""
    from clipo_megatron.nemo_rl.config import validate_master_config

    monkeypatch.setenv("CLIPO_DATA_DIR", str(DATA))
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    clipo = validate_master_config(_recipe(recipe))
    assert clipo.grader == "math_verify" and clipo.method.log_eps == 0.0


def test_a_child_list_replaces_a_parent_mapping(tmp_path):
    """`data.validation` is one set in a parent recipe and a list of sets in a child: the child's
    list replaces it (OmegaConf alone refuses the merge); interpolations still resolve."""
    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    (tmp_path / "parent.yaml").write_text(
        "root: /d\ndata:\n  validation: {data_path: '${root}/a.parquet', processor: p}\n"
        "  train: {data_path: '${root}/t.parquet'}\n"
    )
    (tmp_path / "child.yaml").write_text(
        "defaults: parent.yaml\ndata:\n  validation:\n    - {data_path: '${root}/b.parquet'}\n"
        "    - {data_path: '${root}/c.parquet'}\n"
    )
    cfg = load_recipe(tmp_path / "child.yaml")
    assert cfg["data"]["validation"] == [
        {"data_path": "/d/b.parquet"},
        {"data_path": "/d/c.parquet"},
    ]
    assert cfg["data"]["train"] == {"data_path": "/d/t.parquet"}
    (tmp_path / "back.yaml").write_text(
        "defaults: child.yaml\ndata:\n  validation: {data_path: '${root}/z.parquet'}\n"
    )
    assert load_recipe(tmp_path / "back.yaml")["data"]["validation"] == {
        "data_path": "/d/z.parquet"
    }
