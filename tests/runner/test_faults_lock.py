# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Fault class: two runs on one output.dir (issue 24, item 5).

Both used to run: metrics interleaved, the checkpoint whichever wrote last. Now a run holds an
advisory lock (flock) on output.dir/run.lock for its life; a second run is refused in one line
naming the holder's pid (exit 2, nothing written); the OS releases the lock when the holder
dies, kill -9 included, so a rerun after a crash is never blocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.runner import train  # noqa: E402
from clipo_megatron.runner.run_dir import LOCK_NAME, RunLock  # noqa: E402

from .faults import QUIET, ModelBuilt, refused  # noqa: E402

HOLD = (
    "import sys, time\n"
    "from clipo_megatron.runner.run_dir import RunLock\n"
    "RunLock(sys.argv[1]).acquire()\n"
    "print('held', flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.fixture
def holder(tmp_path):
    """Another process holding output.dir's lock (the run_dir code a run takes it with)."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield out, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_second_run_is_refused_naming_the_holder(holder, capsys, no_model):
    out, proc = holder
    before = sorted(p.name for p in out.iterdir())
    line = refused(capsys, lambda: train.main([*QUIET, f"output.dir={out}"]))
    assert line == (
        f"clipo-megatron train: error: output.dir={out} is in use by another run "
        f"(pid {proc.pid}): wait for it to finish or stop it, or choose another output.dir"
    )
    assert sorted(p.name for p in out.iterdir()) == before == [LOCK_NAME]  # no config.json


def test_after_kill_9_of_the_holder_a_new_run_gets_the_lock(holder, capsys, no_model):
    out, proc = holder
    refused(capsys, lambda: train.main([*QUIET, f"output.dir={out}"]))
    os.kill(proc.pid, signal.SIGKILL)  # no handler, no cleanup: only the OS releases it
    proc.wait()
    with pytest.raises(ModelBuilt):  # past the lock and the checks
        train.main([*QUIET, f"output.dir={out}"])
    assert (out / "config.json").exists()


def test_the_lock_is_held_while_the_run_trains_and_released_after(tmp_path, fake_run):
    out = tmp_path / "run"
    seen = []

    class Probe(fake_run):
        def step(self):
            try:  # another run, mid-training
                RunLock(out).acquire()
                seen.append("acquired")
            except ValueError as e:
                seen.append(str(e))
            return super().step()

    import clipo_megatron.runner.run as run_mod

    run_mod.Run = Probe  # fake_run's monkeypatch restores the attribute afterwards
    assert train.main([*QUIET, "train.steps=2", f"output.dir={out}"]) == 0
    assert len(seen) == 2 and all(f"(pid {os.getpid()})" in s for s in seen)
    RunLock(out).acquire().release()  # free after the run
    assert (out / LOCK_NAME).read_text() == ""  # no stale pid left in it


def test_a_refused_resume_releases_the_lock(tmp_path, capsys, no_model):
    out = tmp_path / "run"
    with pytest.raises(ModelBuilt):
        train.main([*QUIET, f"output.dir={out}"])
    RunLock(out).acquire().release()  # the exception on the way out released it
