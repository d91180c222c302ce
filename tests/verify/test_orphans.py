# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""kill -9 of a process grading answers leaves no verifier process behind (issue 24, item 7).

Before: forkserver workers blocked on a shared queue, the forkserver and the resource tracker
outlived a SIGKILLed run (4 processes still alive 20 minutes later). The hard case is a worker
stuck in one C call holding the GIL (sympy's big powers): no Python-level watchdog runs there,
only the kernel's parent-death signal reaches it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("math_verify")
pytestmark = pytest.mark.runner

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import threading, time
    from clipo_megatron.verify.pool import VerifierPool
    from tests.verify import slow_graders

    def main():
        pool = VerifierPool(2, timeout=600.0)

        def report():  # once both answers are in the workers' hands
            while sum(w.item is not None for w in pool._procs) < 2:
                time.sleep(0.05)
            time.sleep(0.5)
            print("busy", flush=True)

        threading.Thread(target=report, daemon=True).start()
        pool.grade(["hog", "deaf"], ["1", "1"], grader=slow_graders.hog_or_deaf)

    if __name__ == "__main__":
        main()
    """
)


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a live process, None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live descendant of `root`."""
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (st := _stat(int(d))) is not None:
            procs[int(d)] = st
    out, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, start) in procs.items():
            if ppid == parent and pid not in out:
                out[pid] = start
                frontier.append(pid)
    return out


def _alive(pid: int, start: int) -> bool:
    st = _stat(pid)
    return st is not None and st[2] == start and st[1] != "Z"  # a zombie is dead


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_leaves_no_verifier_process(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen(
        [sys.executable, str(script)], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    left: dict[int, int] = {}
    try:
        ready, _, _ = select.select([child.stdout], [], [], 300)
        assert ready and child.stdout.readline().strip() == "busy", "the child never got busy"
        left = _descendants(child.pid)
        assert len(left) >= 3, f"expected 2 workers and the resource tracker, found {left}"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        deadline = time.monotonic() + 60  # polled, not timed: exits take a moment on a busy box
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in left.items()):
            time.sleep(0.2)
        survivors = [p for p, s in left.items() if _alive(p, s)]
        assert survivors == [], f"processes outlived their SIGKILLed parent: {survivors}"
    finally:
        if child.poll() is None:
            child.kill()
        for pid, start in left.items():  # leave nothing running when the test fails
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
