# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""torchrun with a layout that does not fit (issue 31, item 7): the one right line was printed
by every rank above torchrun's own 40-line failure report, whose root cause said only "To
enable traceback see: ...". Now rank 0 prints it once and torchrun's report names it as the
root cause (its error file), the last thing the user reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("omegaconf")
pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]
LINE = (
    "clipo-megatron train: error: parallel.tp * parallel.pp = 3 but 2 processes were launched "
    "(torchrun --nproc-per-node 3)"
)


def test_a_layout_that_does_not_fit_is_one_line_and_torchruns_root_cause(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    argv += ["-m", "clipo_megatron.cli", "train", "parallel.tp=3", f"output.dir={tmp_path / 'o'}"]
    out = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert [x for x in text.splitlines() if x.startswith("clipo-megatron")] == [LINE]  # rank 0
    root_cause = text[text.index("Root Cause") :]
    assert f"traceback : {LINE}" in root_cause, root_cause
    assert not (tmp_path / "o").exists()


SLOW_RANK0 = """
import os, runpy, sys, time
if os.environ["RANK"] == "0":
    time.sleep(3)  # a loaded box: rank 0 reaches the check after rank 1 has
sys.argv = ["clipo-megatron", *sys.argv[1:]]
runpy.run_module("clipo_megatron.cli", run_name="__main__")
"""


def test_the_line_is_printed_when_rank_0_reaches_the_check_last(tmp_path):
    """torchrun stops every rank once one exits: rank 1 exiting first used to kill rank 0 before
    it printed, leaving no line (seen once under load); the other ranks now wait for rank 0."""
    script = tmp_path / "slow_rank0.py"
    script.write_text(SLOW_RANK0)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script)]
    argv += ["train", "parallel.tp=3", f"output.dir={tmp_path / 'o'}"]
    out = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert [x for x in text.splitlines() if x.startswith("clipo-megatron")] == [LINE]
