# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The NeMo-RL preflight as a hostile user meets it (issue 31, item 6): each bad value is named
by the key the user wrote (`num_generations_per_prompt=-1` was reported as
`clipo.method.max_group_size=-1`; a string batch size said "fix the value named below" and
named none), a recipe of the other command is told which command runs it, and the seam check
on a folder that is no NeMo-RL checkout says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.nemo_rl.guard import preflight as pf  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "configs"
TRACK1 = CONFIGS / "track1_qwen3b.yaml"


@pytest.fixture(autouse=True)
def _laptop(monkeypatch, tmp_path):
    """No NeMo-RL, an empty HF cache: results depend on the test only."""
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)


def _problems(recipe: Path, *overrides: str) -> list[str]:
    """The preflight's problems, data-file ones aside (no data here)."""
    report = pf.preflight(recipe, list(overrides), cluster_env=False)
    return [p for p in report.problems if not p.startswith("data.")]


# (override, the one problem it must give): the key the user wrote, first in the line.
PROBES = [
    ("grpo.num_generations_per_prompt=-1", "grpo.num_generations_per_prompt=-1 must be an int in"),
    ("grpo.num_generations_per_prompt=0", "grpo.num_generations_per_prompt=0 must be an int in"),
    ("grpo.num_generations_per_prompt=1", "grpo.num_generations_per_prompt=1 must be an int in"),
    ("grpo.num_generations_per_prompt=100000", "grpo.num_generations_per_prompt=100000 must be"),
    ("grpo.num_generations_per_prompt=abc", "grpo.num_generations_per_prompt='abc' must be an int"),
    ("policy.train_global_batch_size=abc", "policy.train_global_batch_size='abc' must be an int"),
    ("policy.train_global_batch_size=-1", "policy.train_global_batch_size=-1 must be an int >= 1"),
    ("policy.train_global_batch_size=0", "policy.train_global_batch_size=0 must be an int >= 1"),
    ("policy.train_micro_batch_size=abc", "policy.train_micro_batch_size='abc' must be an int"),
    ("grpo.num_prompts_per_step=abc", "grpo.num_prompts_per_step='abc' must be an int in"),
    ("grpo.num_prompts_per_step=-3", "grpo.num_prompts_per_step=-3 must be an int in"),
    ("grpo.max_num_steps=0", "grpo.max_num_steps=0 must be an int >= 1"),
    ("grpo.max_num_steps=abc", "grpo.max_num_steps='abc' must be an int >= 1"),
    (
        "policy.megatron_cfg.tensor_model_parallel_size=abc",
        "policy.megatron_cfg.tensor_model_parallel_size='abc' must be an int in [1, 1024]",
    ),
    (
        "policy.megatron_cfg.pipeline_model_parallel_size=0",
        "policy.megatron_cfg.pipeline_model_parallel_size=0 must be an int in [1, 1024]",
    ),
    (
        "policy.megatron_cfg.context_parallel_size=-2",
        "policy.megatron_cfg.context_parallel_size=-2 must be an int in [1, 1024]",
    ),
    (
        "policy.generation.vllm_cfg.tensor_parallel_size=abc",
        "policy.generation.vllm_cfg.tensor_parallel_size='abc' must be an int in [1, 1024]",
    ),
    ("cluster.num_nodes=-1", "cluster.num_nodes=-1 must be an int >= 1"),
    ("cluster.gpus_per_node=abc", "cluster.gpus_per_node='abc' must be an int >= 1"),
    ("policy.max_total_sequence_length=abc", "policy.max_total_sequence_length='abc' must be"),
    ("policy.megatron_cfg.enabled=abc", "policy.megatron_cfg.enabled='abc' must be true or false"),
    ("policy.sequence_packing.enabled=maybe", "policy.sequence_packing.enabled='maybe' must be"),
    ("policy.generation.temperature=-1", "policy.generation.temperature=-1 must be"),
    ("clipo.method.temperature=abc", "clipo.method.temperature='abc' must be a finite number"),
    ("clipo.enabled=maybe", "clipo.enabled='maybe' must be true or false"),
]


@pytest.mark.parametrize("override, said", PROBES, ids=[p[0] for p in PROBES])
def test_each_bad_value_is_one_problem_naming_the_key_written(override, said):
    problems = _problems(TRACK1, override)
    assert len(problems) == 1, problems
    assert problems[0].startswith(said), problems[0]
    assert "cannot check" not in problems[0] and "named below" not in problems[0]


def test_n_is_never_reported_as_max_group_size():
    """clipo_base.yaml sets clipo.method.max_group_size to ${grpo.num_generations_per_prompt}."""
    problems = _problems(TRACK1, "grpo.num_generations_per_prompt=-1")
    assert not any("max_group_size" in p for p in problems), problems


def test_a_runner_recipe_given_to_the_nemo_rl_driver_is_told_its_command():
    recipe = CONFIGS / "cpu_demo.yaml"
    report = pf.preflight(recipe, [], cluster_env=False)
    assert report.problems == [
        f"{recipe} is a recipe of the single-machine runner (model:, rollout:, train:, output:), "
        f"not a NeMo-RL recipe: run it with `clipo-megatron train --config {recipe}`, not "
        "examples/run_grpo_clipo.py"
    ]


def test_a_nemo_rl_recipe_given_to_train_is_told_its_command(capsys):
    from clipo_megatron.cli import main

    assert main(["train", "--config", str(TRACK1)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"clipo-megatron train: error: {TRACK1} is a NeMo-RL recipe (defaults:, grpo:, policy:, "
        "cluster:, checkpointing:), not a runner recipe: run it with "
        f"`python examples/run_grpo_clipo.py --config {TRACK1}`, not clipo-megatron train"
    ]


@pytest.mark.parametrize(
    "content, said",
    [
        (b"\xff\xfebinary", "UnicodeDecodeError"),
        (b"grpo: [1,\n", "malformed"),
    ],
    ids=["binary", "malformed"],
)
def test_a_broken_recipe_file_is_one_problem(tmp_path, content, said):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(content)
    report = pf.preflight(recipe, [], cluster_env=False)
    assert len(report.problems) == 1 and report.problems[0].startswith(f"--config {recipe}: ")
    assert "\n" not in report.problems[0]


def _seams(path: Path) -> subprocess.CompletedProcess:
    run = [sys.executable, "-m", "clipo_megatron.nemo_rl.port.seams", str(path)]
    return subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_the_seam_check_of_a_missing_folder_says_no_such_checkout(tmp_path):
    out = _seams(tmp_path / "nonexistent")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"{tmp_path / 'nonexistent'}: no such checkout; pass the folder NeMo-RL was cloned into"
    ]


def test_the_seam_check_of_a_folder_that_is_not_nemo_rl_says_so(tmp_path):
    (tmp_path / "README.md").write_text("not NeMo-RL\n")
    out = _seams(tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"{tmp_path} is not a NeMo-RL checkout (no nemo_rl/algorithms/ in it); pass the folder "
        "NeMo-RL was cloned into"
    ]
