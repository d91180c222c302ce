# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""sbatch scripts: `bash -n`, DRY_RUN prints the commands, a fake-srun run whose every `bash -c` payload parses."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["slurm/track1_qwen3b.sh", "slurm/track2_qwen7b.sh", "slurm/common.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_bash_n(script):
    subprocess.run(["bash", "-n", str(ROOT / script)], check=True, timeout=30)


def _run(script, env, cwd):
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        ["bash", str(ROOT / script)],
        env={**base, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "script,nodes,recipe",
    [
        ("slurm/track1_qwen3b.sh", 1, "track1_qwen3b.yaml"),
        ("slurm/track2_qwen7b.sh", 2, "track2_qwen7b.yaml"),
    ],
)
def test_dry_run_prints_commands_from_any_directory(script, nodes, recipe, tmp_path):
    out = _run(
        script,
        {
            "DRY_RUN": "1",
            "CONTAINER": "nemo-rl.sqsh",
            "BASE_LOG_DIR": str(tmp_path),
            "OVERRIDES": "grpo.max_num_steps=3",
        },
        cwd=tmp_path,
    )  # not from a NeMo-RL checkout
    assert out.returncode == 0, out.stderr
    cmds = [ln[2:] for ln in out.stdout.splitlines() if ln.startswith("+ ")]
    srun = [c for c in cmds if c.startswith("srun")]
    assert len(srun) == 1 + 1 + (nodes - 1) + 1 + 1  # validate, head, workers, wait, driver
    assert "--container-image=nemo-rl.sqsh" in srun[0] and "--validate-only" in srun[0]
    assert sum("ray start --head" in c for c in srun) == 1
    assert sum("ray start --address=node0:6379" in c for c in srun) == nodes - 1
    assert f"ray_wait --nodes {nodes}" in srun[-2]
    driver = srun[-1]
    assert f"examples/configs/{recipe}" in driver and "grpo.max_num_steps=3" in driver
    assert f"cluster.num_nodes={nodes}" in driver and f"{tmp_path}/dryrun-logs/driver.log" in driver
    assert not (tmp_path / "dryrun-logs").exists()  # dry run creates nothing


def test_fake_cluster_run_quotes_survive(tmp_path):
    # Not DRY_RUN: a fake srun / scontrol log their arguments; every `bash -c` payload must parse.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    logdir = (
        tmp_path / "srun-calls"
    )  # one file per call: concurrent background sruns cannot interleave
    logdir.mkdir()
    (bindir / "srun").write_text(
        f'#!/bin/bash\nf=$(mktemp -p {logdir})\nprintf "%s\\0" "$@" > "$f.tmp"\n'
        'mv "$f.tmp" "$f.call"\necho 10.0.0.1\n'
    )
    (bindir / "scontrol").write_text("#!/bin/bash\necho n0; echo n1; echo n2\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "n[0-2]",
        "VENV": "/opt/venv",
        "BASE_LOG_DIR": str(tmp_path / "logs"),
        "RAY_HEAD_WAIT_S": "0",
        "CLIPO_ROOT": str(ROOT),
    }
    out = subprocess.run(
        ["bash", str(ROOT / "slurm/track2_qwen7b.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    deadline = (
        time.monotonic() + 60
    )  # the Ray head / worker sruns run in the background: on a loaded CI box
    while True:  # they can take seconds to start, so wait for all of them
        calls = [f.read_text().strip("\0").split("\0") for f in sorted(logdir.glob("*.call"))]
        payloads = [c[c.index("-c") + 1] for c in calls if "-c" in c]
        if len(payloads) >= 6 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(payloads) == 1 + 1 + 2 + 1 + 1  # validate, head, 2 workers, wait, driver
    for p in payloads:
        subprocess.run(["bash", "-n", "-c", p], check=True, timeout=10)
        assert p.startswith("source /opt/venv/bin/activate && export NEMO_RL_ROOT=/opt/nemo-rl")
    assert any("--address=10.0.0.1:6379" in p for p in payloads)
    assert (tmp_path / "logs" / "77-logs").is_dir()


def test_needs_container_or_venv(tmp_path):
    out = _run("slurm/track1_qwen3b.sh", {"DRY_RUN": "1"}, cwd=tmp_path)
    assert out.returncode == 2 and "set CONTAINER" in out.stderr


def test_outside_slurm_without_dry_run_says_how(tmp_path):
    out = _run("slurm/track1_qwen3b.sh", {"CONTAINER": "x"}, cwd=tmp_path)
    assert out.returncode != 0 and "DRY_RUN=1" in out.stderr


def test_sbatch_headers():
    for script, nodes in (("slurm/track1_qwen3b.sh", 1), ("slurm/track2_qwen7b.sh", 2)):
        text = (ROOT / script).read_text()
        assert re.search(rf"^#SBATCH --nodes={nodes}$", text, re.M)
        assert "#SBATCH --gpus-per-node=8" in text
