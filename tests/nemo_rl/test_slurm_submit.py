# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Submitting any recipe (docs/slurm.md, "Submit your recipe"): the nodes and GPUs per node come
from the recipe (slurm/submit.sh passes them to sbatch; a job of another size is refused), an
overlay outside the checkout and its relative parent are mounted, CLIPO_DATA_DIR is asked for only
when the recipe reads it, and the same recipe runs through NeMo-RL's own ray.sub.

Each recipe comes in two forms: self-contained (always run) and, when NeMo-RL's source is beside
the checkout (or NEMO_RL_SRC), an overlay over NeMo-RL's own `grpo-qwen3-30ba3b-8n8g-megatron`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nemo_rl.test_slurm import _fake_cluster, copy_scripts

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT.parent / "shared" / "upstream" / "NeMo-RL-7ea279a"
NEMO_RL = Path(os.environ.get("NEMO_RL_SRC") or SNAPSHOT).resolve()  # the scripts resolve links
EIGHT_NODES = "examples/configs/recipes/llm/grpo-qwen3-30ba3b-8n8g-megatron.yaml"
needs_nemo_rl = pytest.mark.skipif(
    not (NEMO_RL / EIGHT_NODES).is_file() or not (NEMO_RL / "ray.sub").is_file(),
    reason=f"needs NeMo-RL's source (its recipes, ray.sub): set NEMO_RL_SRC or lay 7ea279a at {SNAPSHOT}",
)
# a recipe that reads CLIPO's parquet files, and one that reads NeMo-RL's own dataset
CLIPO_DATA = (
    "data:\n  train: {data_path: '${oc.env:CLIPO_DATA_DIR,data/clipo}/train/gsm8k.parquet'}\n"
)
NEMO_RL_DATA = "data:\n  train: {dataset_name: OpenMathInstruct-2}\n"


def overlay(tmp_path, kind, nodes=8, data=NEMO_RL_DATA):
    """my.yaml in tmp_path/ov (outside the checkout) over a relative parent ../base.yaml."""
    (tmp_path / "ov").mkdir(exist_ok=True)
    if kind == "nemo_rl":  # the documented overlay over NeMo-RL's 8-node recipe
        base = f"defaults:\n  - nemo_rl:{EIGHT_NODES}\n  - clipo_megatron:clipo.yaml\n"
    else:
        base = f"cluster: {{num_nodes: {nodes}, gpus_per_node: 8}}\n{data}"
    (tmp_path / "base.yaml").write_text(base)
    (tmp_path / "ov" / "my.yaml").write_text("defaults: ../base.yaml\ngrpo: {max_num_steps: 5}\n")
    return tmp_path / "ov" / "my.yaml"


KINDS = ["self-contained", pytest.param("nemo_rl", marks=needs_nemo_rl)]


def _env(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CLIPO_", "SLURM_"))}
    base.update(CLIPO_PYTHON=sys.executable, NEMO_RL_ROOT=str(NEMO_RL), HOME=str(tmp_path))
    base.update(BASE_LOG_DIR=str(tmp_path / "logs"), CONTAINER="img")
    return {**base, **env}


def _submit(tmp_path, *args, **env):
    return subprocess.run(
        ["bash", str(ROOT / "slurm/submit.sh"), *args],
        env=_env(tmp_path, **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_an_8_node_recipe_in_a_2_node_job_is_refused_in_one_line(tmp_path, kind):
    recipe = overlay(tmp_path, kind)
    proc, steps, _ = _fake_cluster(
        tmp_path, "container", RECIPE=str(recipe), NEMO_RL_ROOT=str(NEMO_RL)
    )  # sbatch slurm/track2_qwen7b.sh with RECIPE=my.yaml: 2 nodes allocated
    assert proc.returncode == 2 and proc.stdout == "" and steps == {}  # nothing started
    (line,) = proc.stderr.splitlines()
    assert f"{recipe} asks for 8 nodes (cluster.num_nodes in " in line
    assert "but this job has 2 (SLURM_JOB_NUM_NODES)" in line
    assert f"`slurm/submit.sh {recipe}` (it passes sbatch --nodes=8)" in line


@pytest.mark.parametrize("kind", KINDS)
def test_submit_passes_the_recipes_nodes_to_sbatch(tmp_path, kind):
    recipe, bindir = overlay(tmp_path, kind), tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(
        '#!/bin/bash\nprintf "%s\\0" "$@" > "$REC"; printf "%s" "$RECIPE" > "$REC.recipe"\n'
    )
    (bindir / "sbatch").chmod(0o755)
    rec = tmp_path / "sbatch.argv"
    path = f"{bindir}:{os.environ['PATH']}"
    out = _submit(tmp_path, "ov/my.yaml", "grpo.max_num_steps=3", PATH=path, REC=str(rec))
    assert out.returncode == 0, out.stderr
    argv = rec.read_bytes().decode().split("\0")[:-1]
    assert argv[:2] == ["--nodes=8", "--gpus-per-node=8"]
    assert argv[3:] == [str(ROOT / "slurm/run_recipe.sh"), "grpo.max_num_steps=3"]
    assert Path(f"{rec}.recipe").read_text() == str(recipe)  # absolute: the job runs elsewhere


@pytest.mark.parametrize("kind", KINDS)
def test_the_dry_run_says_where_the_nodes_came_from_and_mounts_the_overlay(tmp_path, kind):
    recipe = overlay(tmp_path, kind)
    out = _submit(tmp_path, "ov/my.yaml", DRY_RUN="1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    setter = NEMO_RL / EIGHT_NODES if kind == "nemo_rl" else tmp_path / "base.yaml"
    assert f"+ sbatch --nodes=8 --gpus-per-node=8 --job-name=clipo-my {ROOT}/slurm" in out.stdout
    assert f"[clipo] nodes: 8 x 8 GPUs, from cluster.num_nodes in {setter}; the job has 8" in lines
    srun = [ln for ln in lines if ln.startswith("+ srun")]
    assert len(srun) == 1 + 1 + 7  # preflight, head, 7 workers
    files = [str(tmp_path / "base.yaml"), str(recipe)]  # outside the checkout: mounted
    for ln in srun:
        mounts = re.search(r"--container-mounts=(\S+)", ln).group(1).split(",")
        assert [f"{f}:{f}" for f in files] == [m for m in mounts if m.split(":")[0] in files]
    for ln in srun[:2]:  # the preflight and the driver read the overlay at its own path
        assert f"--config {recipe} " in ln
    said = f"[clipo] recipe files mounted into the container (outside the mounted folders): {' '.join(files)}; copied: none"
    assert said in lines


@pytest.mark.parametrize("reads", ["clipo", "nemo_rl"])
def test_clipo_data_dir_is_asked_for_only_when_the_recipe_reads_it(tmp_path, reads):
    """Unset, with no data/clipo in the checkout: a CLIPO parquet recipe stops in one line; a
    recipe over NeMo-RL's own dataset runs, CLIPO_DATA_DIR neither exported nor mounted."""
    root = tmp_path / "checkout"  # no data/clipo here, whatever the real checkout holds
    copy_scripts(root)
    data = CLIPO_DATA if reads == "clipo" else NEMO_RL_DATA
    recipe = overlay(tmp_path, "self-contained", nodes=2, data=data)
    proc, steps, _ = _fake_cluster(
        tmp_path,
        "container",
        RECIPE=str(recipe),
        CLIPO_ROOT=str(root),
        CLIPO_DATA_DIR="",
        PYTHONPATH=str(ROOT),  # the package, read from this checkout
    )
    if reads == "clipo":
        assert proc.returncode == 2 and steps == {}
        assert proc.stderr.splitlines() == [
            f"[clipo] CLIPO_DATA_DIR={root}/data/clipo: no such directory; set CLIPO_DATA_DIR "
            "to the parquet root (train/, test/)"
        ]
        return
    assert proc.returncode == 0, proc.stderr
    assert "[clipo] CLIPO_DATA_DIR: not read by this recipe" in proc.stdout
    assert not any("CLIPO_DATA_DIR" in a for args in steps.values() for a in args)


# NeMo-RL's own ray.sub, run as sbatch would run it: Slurm's variables from --nodes, and stubs for
# the programs it calls. The head's srun signals the Ray head up and runs ray.sub's driver command
# file (our COMMAND) as its head step does; workers stay up until the driver is done; ray.sub's
# polls run quicker.
FAKE_SBATCH = r"""#!/bin/bash
for a in "$@"; do [[ "$a" == --nodes=* ]] && nodes=${a#--nodes=}; done
printf '%s\0' "$@" > "$FAKE/sbatch.argv"
export SLURM_JOB_ID=99 SLURM_JOB_NUM_NODES=$nodes SLURM_JOB_NODELIST=fake SLURM_SUBMIT_DIR=$PWD
export SLURM_JOB_PARTITION=p SLURM_JOB_ACCOUNT=a
exec bash "${@: -1}"
"""
FAKE_SRUN = r"""#!/bin/bash
printf '%s\0' "$@" > "$(mktemp -p "$FAKE" srun.XXXXXX)"
prev=; for a in "$@"; do [[ "$prev" == -o ]] && log=$(dirname "$a"); prev=$a; done
if [[ " $* " == *" --container-name=ray-head "* ]]; then
  touch "$log/STARTED_RAY_HEAD"; bash "$log/driver_command.sh"; rc=$?; touch "$log/DRIVER_DONE"; exit $rc
fi
until [[ -f "$log/DRIVER_DONE" ]]; do sleep 0.1; done
"""
FAKE_BIN = {
    "sbatch": FAKE_SBATCH,
    "srun": FAKE_SRUN,
    "sinfo": "#!/bin/bash\n",  # no GRES
    "scontrol": '#!/bin/bash\nif [[ "$2" == hostnames ]]; then for ((i = 0; i < SLURM_JOB_NUM_NODES; i++)); '
    'do echo "n$i"; done; else echo "NodeName=$3 CPUTot=4"; fi\n',
    "host": '#!/bin/bash\necho "$1 has address 10.0.0.${1#n}"\n',
    "python": '#!/bin/bash\nprintf "%s\\0" "$@" > "$FAKE/driver.argv"\n'
    'echo "$PWD|$NEMO_RL_ROOT|$PYTHONPATH|${CLIPO_DATA_DIR-unset}" > "$FAKE/driver.env"\n'
    "/bin/sleep 1; exit 3\n",  # ray.sub sees the head step up before it ends
    "sleep": "#!/bin/bash\nexec /bin/sleep 0.05\n",  # ray.sub's polls (2 s, 5 s), quicker
}


@needs_nemo_rl
def test_the_recipe_runs_through_nemo_rls_own_ray_sub(tmp_path):
    recipe, bindir, fake = (
        overlay(tmp_path, "self-contained", nodes=2),
        tmp_path / "bin",
        tmp_path / "fake",
    )
    bindir.mkdir()
    fake.mkdir()
    for name, text in FAKE_BIN.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "FAKE": str(fake),
        "RAY_SUB": str(NEMO_RL / "ray.sub"),
    }
    out = _submit(tmp_path, "ov/my.yaml", "grpo.max_num_steps=3", "+note=it's x", **env)
    assert out.returncode == 3, out.stderr[-3000:]  # ray.sub's status is the driver's
    sbatch = (fake / "sbatch.argv").read_bytes().decode().split("\0")[:-1]
    assert sbatch[:3] == ["--nodes=2", "--gpus-per-node=8", "--job-name=clipo-my"]
    assert sbatch[-1] == str(NEMO_RL / "ray.sub")
    sruns = [p.read_bytes().decode().split("\0")[:-1] for p in fake.glob("srun.*")]
    (head,) = [a for a in sruns if "--container-name=ray-head" in a]
    (workers,) = [a for a in sruns if "--container-name=ray-worker" in a]
    assert "--nodes=1" in workers  # ray.sub: SLURM_JOB_NUM_NODES - 1 workers, from --nodes
    mounts = next(x for x in head if x.startswith("--container-mounts=")).split("=", 1)[1]
    files = [str(tmp_path / "base.yaml"), str(recipe)]
    logs = tmp_path / "logs"  # ray.sub's BASE_LOG_DIR: its head reads files there
    assert mounts.split(",") == [f"{ROOT}:{ROOT}", f"{logs}:{logs}", f"{NEMO_RL}:{NEMO_RL}"] + [
        f"{f}:{f}" for f in files
    ]
    assert "--container-image=img" in head and f"--container-workdir={ROOT}" in head
    argv = (fake / "driver.argv").read_bytes().decode().split("\0")[:-1]
    overrides = ["grpo.max_num_steps=3", "+note=it's x"]
    assert argv == ["examples/run_grpo_clipo.py", "--config", str(recipe), *overrides]
    cwd, nemo_rl_root, pythonpath, data = (fake / "driver.env").read_text().strip().split("|")
    assert (cwd, nemo_rl_root, data) == (str(ROOT), str(NEMO_RL), "unset")
    assert pythonpath.startswith(f"{ROOT}:{NEMO_RL}")
    assert "[clipo] ray.sub's COMMAND runs the driver on the Ray head" not in out.stdout  # it ran


def test_the_ray_sub_dry_run_prints_the_command(tmp_path):
    overlay(tmp_path, "self-contained", nodes=2, data=CLIPO_DATA)
    (tmp_path / "data").mkdir()
    ray_sub = tmp_path / "ray.sub"
    ray_sub.write_text("")
    data = str(tmp_path / "data")
    out = _submit(tmp_path, "ov/my.yaml", DRY_RUN="1", RAY_SUB=str(ray_sub), CLIPO_DATA_DIR=data)
    assert out.returncode == 0, out.stderr
    line = out.stdout.splitlines()[-1]
    assert line.startswith("+ COMMAND='cd ") and line.endswith(
        f"sbatch --nodes=2 --gpus-per-node=8 --job-name=clipo-my {ray_sub}"
    )
    assert f"CLIPO_DATA_DIR={data}" in line and f"{data}:{data}" in line  # exported, mounted
    assert f"python examples/run_grpo_clipo.py --config {tmp_path}/ov/my.yaml" in line


def test_gpus_per_node_other_than_the_recipes_is_refused_in_one_line(tmp_path):
    recipe = overlay(tmp_path, "self-contained", nodes=2)
    proc, steps, _ = _fake_cluster(tmp_path, "container", RECIPE=str(recipe), GPUS_PER_NODE="4")
    assert proc.returncode == 2 and steps == {}
    (line,) = proc.stderr.splitlines()
    assert "asks for 8 GPUs per node (cluster.gpus_per_node) but this job has 4" in line


def test_the_cluster_read_from_the_chain_and_the_overrides(tmp_path):
    from clipo_megatron.nemo_rl.guard.recipe_cluster import recipe_cluster

    recipe = overlay(tmp_path, "self-contained", data=CLIPO_DATA)
    need = recipe_cluster(recipe)
    assert (need.nodes, need.gpus_per_node, need.reads_clipo_data_dir) == (8, 8, True)
    assert need.nodes_from == f"cluster.num_nodes in {tmp_path / 'base.yaml'}"
    assert need.files == (tmp_path / "base.yaml", recipe)  # parents first
    assert recipe_cluster(recipe, ["cluster.num_nodes=2"]).nodes_from == (
        "the override cluster.num_nodes=2"
    )
    (tmp_path / "base.yaml").write_text("cluster: {gpus_per_node: 8}\n")
    with pytest.raises(ValueError, match=r"cluster.num_nodes is None .* pass cluster.num_nodes=N"):
        recipe_cluster(recipe)


def test_submit_asks_for_clipo_data_dir_before_queueing(tmp_path):
    overlay(tmp_path, "self-contained", data=CLIPO_DATA)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sbatch").write_text('#!/bin/bash\ntouch "$0.ran"\n')
    (tmp_path / "bin" / "sbatch").chmod(0o755)
    path = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    out = _submit(tmp_path, "ov/my.yaml", PATH=path, CLIPO_DATA_DIR=str(tmp_path / "none"))
    assert out.returncode == 2 and not (tmp_path / "bin" / "sbatch.ran").exists()
    assert out.stderr.splitlines() == [
        f"[clipo] CLIPO_DATA_DIR={tmp_path}/none: no such directory; set CLIPO_DATA_DIR to the "
        "parquet root (train/, test/)"
    ]
