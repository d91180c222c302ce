# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One verifier worker process: its main loop, its own alarm, and the parent's handle on it.

Apart from `verify/pool.py` (the dispatch and the deadlines) because this is the code that
runs inside the spawned child: it grades ONE answer at a time in its main thread under a
`signal.setitimer` alarm, and dies with its parent (PR_SET_PDEATHSIG), so nothing here may
rely on the parent's state.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from multiprocessing.connection import Connection

from clipo_megatron.verify.graders import Grader, Verdict, quiet_math_verify, resolve_grader


class _Timeout(BaseException):
    """Not an Exception: math-verify and sympy catch `Exception` around their steps, which
    swallowed the alarm and let a hostile answer run on to the parent's hard deadline."""


def _on_alarm(signum, frame):  # pragma: no cover - runs in worker processes
    raise _Timeout()


def _die_with_parent(parent_pid: int) -> None:  # pragma: no cover - runs in worker processes
    """SIGKILL this worker when its parent dies, even mid C call (kernel side, Linux)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent_pid:  # it died before the prctl
        os._exit(1)

    def watch() -> None:  # elsewhere (no prctl), a parent-pid watchdog while Python runs
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _grade_timed(
    response: str, gt: str, kind: str, grader: str | Grader, timeout: float, extract: bool
) -> Verdict:
    """One answer under this worker's alarm (the worker's main thread)."""
    from clipo_megatron.verify.choice import graded_answer

    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        if extract:  # what this grader reads (the paper grader's module only when it grades)
            if grader == "paper":
                from clipo_megatron.verify.paper import graded_answer as paper_graded_answer

                answer = paper_graded_answer(response, kind)
            else:
                answer = graded_answer(response, kind)
        else:
            answer = None
        score = float(resolve_grader(grader)(response, gt, kind))
        return Verdict(score, "ok", answer=answer)
    except _Timeout:
        return Verdict(0.0, "timeout", f"over {timeout:g} s (alarm)")
    except Exception as e:  # a malformed answer is a wrong answer, not a crash
        return Verdict(0.0, "error", f"{type(e).__name__}: {e}"[:200])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def worker_main(conn: Connection, parent_pid: int) -> None:  # pragma: no cover - worker process
    """The worker's loop: "ready" once math-verify is imported, then one Verdict per task."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        import math_verify  # noqa: F401  (sympy's import, before the first deadline)
    except BaseException as e:  # the true cause, for the parent's one line
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    quiet_math_verify()
    signal.signal(signal.SIGALRM, _on_alarm)
    conn.send("ready")
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the parent closed its end or died
            return
        if task is None:
            return
        try:
            verdict = _grade_timed(*task)
        except _Timeout:  # the alarm went off between the grade and its reset
            verdict = Verdict(0.0, "timeout", "alarm at the deadline")
        conn.send(verdict)


_MAIN_SWAP = threading.Lock()


@contextlib.contextmanager
def callers_main_hidden() -> Iterator[None]:
    """While a worker starts, `__main__` is an empty module, so the child imports no main.

    `spawn` re-imports the caller's main in every child: a script without
    `if __name__ == "__main__":` ran itself again there (and its `verify_batch` call failed),
    and a main read from stdin or a notebook cannot be re-imported at all. The workers need
    nothing of it: their code and graders live in modules."""
    with _MAIN_SWAP:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


def start_failure(msg: object) -> str | None:
    """The cause a worker sent before exiting at start-up, or None for any other message."""
    if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "failed":
        return str(msg[1])
    return None


class WorkerProcess:
    """The parent's handle on one worker: its pipe, its process, the answer it holds."""

    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, os.getpid()), daemon=True)
        with callers_main_hidden():
            self.proc.start()
        child.close()
        self.started = time.monotonic()
        self.ready = False
        self.item: int | None = None  # index of the answer it holds
        self.deadline = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()
