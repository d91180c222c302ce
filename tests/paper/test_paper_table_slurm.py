# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""slurm/paper_table.sh: a table's rows as job arrays, in DRY_RUN (no cluster needed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clipo_megatron.paper.layout import NODES
from clipo_megatron.paper.recipes import recipe_path
from clipo_megatron.paper.scores import row_settings, tables

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "slurm" / "paper_table.sh"
TABLES = tables()
TASK = re.compile(r"^\[clipo\] (\S+) task (\d+) \((track\d), (\d) node\(s\)\): (.+) -> (\S+)$")


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "data").mkdir(exist_ok=True)
    base = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHON": sys.executable,
        "CLIPO_PYTHON": sys.executable,  # reads the recipe before the job (slurm/recipe.sh)
        "CLIPO_DATA_DIR": str(tmp_path / "data"),
        "BASE_LOG_DIR": str(tmp_path),
        "CONTAINER": "nemo-rl.sqsh",
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**base, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bash_n():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)


@pytest.mark.parametrize("table", list(TABLES))
def test_the_dry_run_lays_out_one_task_per_trained_row(table, tmp_path):
    out = _run(tmp_path, table, "grpo.max_num_steps=3", DRY_RUN="1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    tasks = [TASK.match(ln).groups() for ln in lines if TASK.match(ln)]
    rows = TABLES[table]["rows"]
    trained = [r for r in rows if row_settings(table, r).trained]
    assert [t[4] for t in tasks] == trained and [int(t[1]) for t in tasks] == list(
        range(len(trained))
    )
    for _, _, track, nodes, row, recipe in tasks:
        s = row_settings(table, row)
        assert (ROOT / recipe).is_file() and ROOT / recipe == recipe_path(s)
        assert (track, int(nodes)) == (s.track, NODES[s.track])
    untrained = [ln for ln in lines if ", not a run: " in ln]
    assert len(untrained) == len(rows) - len(trained)
    # one sbatch per track; together the arrays are the tasks, each with its track's nodes
    sbatch = [ln for ln in lines if ln.startswith("+ sbatch ")]
    assert len(sbatch) == len({t[2] for t in tasks})
    indices = []
    for ln in sbatch:
        array = re.search(r"--array=(\S+)", ln).group(1).split(",")
        nodes = int(re.search(r"--nodes=(\d)", ln).group(1))
        assert {int(t[3]) for t in tasks if t[1] in array} == {nodes}
        assert ln.endswith(f"slurm/paper_table.sh {table} grpo.max_num_steps=3")
        indices += [int(i) for i in array]
    assert sorted(indices) == list(range(len(trained)))


def test_a_task_runs_its_rows_recipe_as_a_single_job(tmp_path):
    """Task 7 of table3 with two seeds: Track II CLIPO-fixed, seed 2, on two nodes, through
    slurm/common.sh (preflight, head, one worker), its checkpoint folder its own."""
    out = _run(
        tmp_path,
        "table3",
        "grpo.max_num_steps=7",
        DRY_RUN="1",
        SLURM_ARRAY_TASK_ID="7",
        SEEDS="1 2",
    )
    assert out.returncode == 0, out.stderr
    recipe = ROOT / "examples/configs/reproduce/track2_grpo_clipo_fixed_tau002.yaml"
    assert f"row 'Track II CLIPO-fixed', recipe {recipe.relative_to(ROOT)}" in out.stdout
    srun = [ln for ln in out.stdout.splitlines() if ln.startswith("+ srun")]
    assert len(srun) == 3 and "--validate-only" in srun[0]
    head = srun[1]
    assert f"--config {recipe}" in head and "cluster.num_nodes=2" in head
    assert "grpo.seed=2" in head and head.endswith(
        "grpo.max_num_steps=7 2>&1 | tee " + f"{tmp_path}/dryrun-logs/driver.log' &"
    )
    ckpt = "results/reproduce/track2_grpo_clipo_fixed_tau002/seed2"  # under the mounted checkout
    assert f"checkpointing.checkpoint_dir={ckpt}" in head and f"{ROOT}:{ROOT}," in head


def test_errors_say_what_to_do(tmp_path):
    assert "usage: bash slurm/paper_table.sh TABLE" in _run(tmp_path).stderr
    out = _run(tmp_path, "table9", DRY_RUN="1")
    assert out.returncode == 2 and "no table 'table9'; tables: table1" in out.stderr
    out = _run(tmp_path, "table1", SLURM_JOB_ID="5")
    assert out.returncode == 2 and "with bash, not sbatch" in out.stderr
    out = _run(tmp_path, "table1", DRY_RUN="1", SLURM_ARRAY_TASK_ID="8")
    assert out.returncode == 2 and "table1 has no task 8" in out.stderr


DOCUMENTED = re.compile(
    r"((?:[A-Z_]+=\S+ )*DRY_RUN=1 (?:[A-Z_]+=\S+ )*bash slurm/paper_table\.sh \w+)"
)


def test_the_documented_dry_runs_work_as_written(tmp_path):
    """Every dry run of this script in its header and in docs/reproduce.md, run as written from
    the checkout with no CLIPO_ / SLURM_ variables set."""
    docs = [SCRIPT.read_text(), (ROOT / "docs" / "reproduce.md").read_text()]
    commands = sorted({m.group(1) for text in docs for m in DOCUMENTED.finditer(text)})
    assert len(commands) >= 3
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLIPO_", "SLURM_"))}
    for command in commands:
        out = subprocess.run(
            ["bash", "-c", command],
            # the user's activated environment: its python3 reads the recipe (slurm/recipe.sh)
            env={
                **env,
                "HOME": str(tmp_path),
                "PYTHON": sys.executable,
                "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
            },
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, (command, out.stderr)
        assert "+ sbatch --array=" in out.stdout or out.stdout.count("+ srun ") >= 2, command
    assert not (ROOT / "slurm-logs").exists()  # a dry run writes nothing


@pytest.mark.parametrize("script", ["slurm/track1_qwen3b.sh", "slurm/track2_qwen7b.sh"])
def test_the_track_scripts_say_which_recipe_family_they_run(script, monkeypatch):
    """The header names the default recipe (the recommended one) with its grader, epochs and
    warm-up, and the reproduction root one RECIPE away with its own: all as the recipes say."""
    from clipo_megatron.nemo_rl.config import validate_master_config
    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    text = (ROOT / script).read_text()
    default = re.search(r'^RECIPE="\$\{RECIPE:-(\S+)\}"$', text, re.M).group(1)
    said = re.search(
        r"recipe by default \((\S+): grader (\w+), (\d+) epochs,\n# (\d+) head-only", text
    ).groups()
    repro = re.search(
        r"RECIPE=(\S+) \(the\n# authors' run: grader (\w+), (\d+) epochs, (\d+) head", text
    )
    for path, grader, epochs, warmup in ((said[0], *said[1:]), repro.groups()):
        cfg = load_recipe(ROOT / path)
        clipo = validate_master_config(cfg)
        assert (clipo.grader, cfg["grpo"]["max_num_epochs"], clipo.method.warmup_steps) == (
            grader,
            int(epochs),
            int(warmup),
        ), path
    assert said[0] == default and "reproduce/" not in default
    assert "/reproduce/" in repro.group(1)
