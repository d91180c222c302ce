# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The parent's side of a verifier worker's start-up: waiting for its "ready", the deadline on
it, and the one line that says why a worker did not start.

Apart from `verify/pool.py` (dispatch and per-answer deadlines) because a worker can still be
starting when `VerifierPool.start()` waits for it and when a batch's dispatch meets a fresh
replacement: both must give up after the same time with the same message. Like the rest of the
package it imports no torch (the spawned workers import `clipo_megatron.verify`).
"""

from __future__ import annotations

import time
from multiprocessing.connection import wait

from clipo_megatron.verify.pool_worker import WorkerProcess, start_failure

START_TIMEOUT = 300.0  # seconds for a fresh worker to import math-verify (a loaded box is slow)


def not_started_message() -> str:
    """A worker past `START_TIMEOUT` without its "ready"."""
    return f"a verifier worker did not start within {START_TIMEOUT:g} s"


def start_error(w: WorkerProcess, msg: object) -> str:
    """Why a worker did not start: the cause it sent, else its exit code."""
    cause = start_failure(msg)
    if cause is not None:
        return f"a verifier worker could not start: {cause}"
    w.proc.join(1)
    return (
        f"a verifier worker exited with code {w.proc.exitcode} while starting, before it could "
        "report a cause (its stderr is above)"
    )


def wait_until_ready(procs: list[WorkerProcess]) -> None:
    """Block until every worker has sent "ready"; RuntimeError for one that fails or is late."""
    while not all(w.ready for w in procs):
        starting = [w for w in procs if not w.ready]
        wait([x for w in starting for x in (w.conn, w.proc.sentinel)], timeout=1.0)
        for w in starting:
            msg = w.conn.recv() if w.conn.poll() else None
            if msg == "ready":
                w.ready = True
            elif msg is not None or not w.proc.is_alive():
                raise RuntimeError(start_error(w, msg))
            elif time.monotonic() > w.started + START_TIMEOUT:
                raise RuntimeError(not_started_message())
