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

from clipo_megatron.nemo_rl.config import nemo_rl_root

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
    from clipo_megatron.nemo_rl import preflight as pf

    monkeypatch.setenv("CLIPO_DATA_DIR", str(DATA))
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)  # the real one: test below
    report = pf.preflight(recipe, cluster_env=False)
    assert report.problems == []
    assert report.config["data"]["train"]["split_validation_size"] == 0


@needs_data
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_recipe_with_nemo_rls_parent(recipe, nemo_rl_parent, monkeypatch):
    from clipo_megatron.nemo_rl import preflight as pf

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
