# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Batch grading in worker processes, with a per-answer deadline that holds whatever the others do.

Why processes: math-verify's timeouts use `signal.alarm`, which raises in threads, and sympy
can spin for minutes on adversarial answers, some of it in C code no signal reaches
(`\\boxed{9^{9^{9^9}}}`). So each worker holds ONE answer at a time:

- the worker grades in its main thread under its own `signal.setitimer` alarm (math-verify's
  alarms are off so they do not overwrite it): a slow answer in Python -> status "timeout",
  the worker carries on;
- the parent holds a hard deadline per answer (timeout + slack): a worker past it is killed,
  its one answer gets "timeout", a fresh worker takes its place, and every other answer is
  graded as usual -- one hostile answer costs only itself;
- a worker that dies holding an answer (crash, OOM killer) has it retried once on a fresh
  worker, then "killed";
- an answer longer than `max_chars` is never sent: "too_long" (parsing is where the time goes).

Statuses: "ok", "timeout", "killed", "error" (the grader raised; the message in `detail`),
"too_long" (`verify/graders.py`, with `status_counts`, the per-status counts the drivers log).
The worker's own side (its loop, its alarm) is `verify/pool_worker.py`; waiting for a worker to
start, `verify/pool_start.py`.

Workers are started with `spawn` (never fork: forking a process with torch threads running can
deadlock) and are the parent's own children, so the kernel kills them when it dies, SIGKILL
included (PR_SET_PDEATHSIG; a forkserver would be their parent instead and could outlive us).
PR_SET_PDEATHSIG fires when the *thread* that started a worker ends: a pool first used from a
short-lived thread restarts its workers on the next batch (no answer is lost).

    verify_batch(responses, ground_truths, "math") -> [1.0, 0.0, ...]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from multiprocessing.connection import wait

from clipo_megatron.verify.graders import (
    KINDS,
    Grader,
    Scores,
    Verdict,
    check_grader_importable,
    check_texts,
    grade_one,
    resolve_grader,
)
from clipo_megatron.verify.pool_start import (
    START_TIMEOUT,
    not_started_message,
    start_error,
    wait_until_ready,
)
from clipo_megatron.verify.pool_worker import WorkerProcess, start_failure

DEFAULT_TIMEOUT = 10.0  # seconds per answer
DEFAULT_MAX_CHARS = 100_000  # ~25k tokens of text: past any max_tokens the recipes use


class VerifierPool:
    """Worker processes grading (response, ground truth, kind) triples; reuse one for many batches.

    timeout: seconds per answer (the worker's alarm; the parent kills at timeout + slack).
    max_chars: longer answers get "too_long" without being parsed (0: no cap).
    grader: the default grader (a function or a name in GRADERS); `grade(grader=...)` overrides.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        grader: str | Grader = grade_one,
        max_chars: int = DEFAULT_MAX_CHARS,
        slack: float = 2.0,
    ):
        if timeout <= 0:
            raise ValueError(f"timeout={timeout} must be > 0 seconds")
        if max_chars < 0:
            raise ValueError(f"max_chars={max_chars} must be >= 0 (0: no cap)")
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self.timeout = float(timeout)
        self.grader = grader
        self.max_chars = int(max_chars)
        self.slack = slack
        self._ctx = mp.get_context("spawn")
        self._procs: list[WorkerProcess] = []
        self._lock = threading.Lock()

    # -- lifecycle

    def _replace(self, w: WorkerProcess) -> None:
        w.kill()
        self._procs[self._procs.index(w)] = WorkerProcess(self._ctx)

    def start(self) -> None:
        """Start the workers and wait until each is ready (else the first batch starts them)."""
        with self._lock:
            while len(self._procs) < self.workers:
                self._procs.append(WorkerProcess(self._ctx))
            wait_until_ready(self._procs)

    def close(self) -> None:
        """Stop every worker (politely, then by force)."""
        with self._lock:
            procs, self._procs = self._procs, []
            for w in procs:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
            for w in procs:
                w.proc.join(2)
                if w.proc.is_alive():
                    w.proc.kill()
                    w.proc.join(5)
                w.conn.close()

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._procs if w.proc.pid is not None]

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- grading

    def grade(
        self,
        responses: Sequence[str],
        ground_truths: Sequence[str],
        kinds: str | Sequence[str] = "math",
        *,
        grader: str | Grader | None = None,
        extract: bool = False,
    ) -> list[Verdict]:
        """Verdicts in input order. Never raises for a bad answer; ValueError for bad arguments.

        grader: a function (response, ground_truth, kind) -> float defined at module top level
        (workers import it), or a name in GRADERS; None: the pool's. extract: also return
        `graded_answer` (what was read) in `Verdict.answer`, computed under the same deadline.
        """
        kinds = [kinds] * len(responses) if isinstance(kinds, str) else list(kinds)
        if not len(responses) == len(ground_truths) == len(kinds):
            raise ValueError(
                f"{len(responses)} responses, {len(ground_truths)} ground truths, {len(kinds)} kinds"
            )
        check_texts(responses, ground_truths)
        bad = sorted({k for k in kinds if k not in KINDS})
        if bad:
            raise ValueError(f"unknown answer kind(s) {bad}; expected one of {KINDS}")
        g = self.grader if grader is None else grader
        check_grader_importable(resolve_grader(g))  # fails here, not in every worker
        out: list[Verdict | None] = [None] * len(responses)
        todo: deque[int] = deque()
        for i, r in enumerate(responses):
            if self.max_chars and len(r) > self.max_chars:
                out[i] = Verdict(0.0, "too_long", f"{len(r)} chars > max_chars={self.max_chars}")
            else:
                todo.append(i)
        if todo:
            tasks = [
                (str(responses[i]), str(ground_truths[i]), kinds[i], g, self.timeout, extract)
                for i in range(len(responses))
            ]
            with self._lock:
                self._run(tasks, todo, out)
        return [v for v in out if v is not None]

    def _run(self, tasks: list[tuple], todo: deque[int], out: list[Verdict | None]) -> None:
        """Dispatch one answer per ready worker until every answer has a verdict."""
        while len(self._procs) < self.workers:
            self._procs.append(WorkerProcess(self._ctx))
        tries = Counter[int]()
        busy = 0
        while todo or busy:
            now = time.monotonic()
            for w in self._procs:  # hand out work
                if w.ready and w.item is None and todo:
                    i = todo.popleft()
                    try:
                        w.conn.send(tasks[i])
                    except OSError:  # died while idle: a fresh one, the answer goes back
                        todo.appendleft(i)
                        self._replace(w)
                        continue
                    w.item, w.deadline = i, now + self.timeout + self.slack
                    tries[i] += 1
                    busy += 1
            waits = [w.deadline for w in self._procs if w.item is not None]
            waits += [w.started + START_TIMEOUT for w in self._procs if not w.ready]
            handles = [x for w in self._procs for x in (w.conn, w.proc.sentinel)]
            wait(handles, timeout=max(0.0, min(waits) - time.monotonic()) if waits else None)
            now = time.monotonic()
            for w in list(self._procs):
                msg = None
                if w.conn.poll():
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                if msg == "ready":
                    w.ready = True
                elif isinstance(msg, Verdict) and w.item is not None:
                    out[w.item], w.item = msg, None
                    busy -= 1
                elif start_failure(msg) is not None or (not w.ready and not w.proc.is_alive()):
                    raise RuntimeError(start_error(w, msg))
                elif not w.proc.is_alive():  # died: retry its answer once, then "killed"
                    if w.item is not None:
                        busy -= 1
                        if tries[w.item] < 2:
                            todo.appendleft(w.item)
                        else:
                            out[w.item] = Verdict(
                                0.0, "killed", f"worker died (exit code {w.proc.exitcode}) twice"
                            )
                    self._replace(w)
                elif w.item is not None and now >= w.deadline:  # deaf to its alarm: kill it
                    out[w.item] = Verdict(
                        0.0, "timeout", f"over {self.timeout + self.slack:g} s (worker killed)"
                    )
                    busy -= 1
                    w.item = None
                    self._replace(w)
                elif not w.ready and now >= w.started + START_TIMEOUT:
                    raise RuntimeError(not_started_message())


_SHARED: VerifierPool | None = None
_SHARED_LOCK = threading.Lock()


def shared_pool(**settings) -> VerifierPool:
    """One process-wide pool, started on first use (start-up ~1-2 s, then reused).

    settings (timeout, max_chars, workers): applied to the shared pool (a change restarts it)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is not None and any(getattr(_SHARED, k) != v for k, v in settings.items()):
            _SHARED.close()
            _SHARED = None
        if _SHARED is None:
            _SHARED = VerifierPool(**settings)
        return _SHARED


def grade_batch(
    responses: Sequence[str],
    ground_truths: Sequence[str],
    kind: str | Sequence[str] = "math",
    *,
    pool: VerifierPool | None = None,
    grader: str | Grader | None = None,
) -> list[Verdict]:
    """`verify_batch` with each answer's Verdict (score, status, detail)."""
    return (pool or shared_pool()).grade(responses, ground_truths, kind, grader=grader)


def verify_batch(
    responses: Sequence[str],
    ground_truths: Sequence[str],
    kind: str | Sequence[str] = "math",
    *,
    pool: VerifierPool | None = None,
    grader: str | Grader | None = None,
) -> Scores:
    """Binary rewards (1.0 / 0.0) for a batch: `kind` is "math" (\\boxed{} + math-verify) or "mc"
    (option letter), one for all or one per response. Safe to call from any thread.

    grader: None (the pool's, `grade_one` by default), a name in GRADERS (add a grader by
    adding "name": "module:function" there), or a top-level function
    (response, ground_truth, kind) -> float; it runs in the workers under the deadline.
    The result is a list of floats with `.statuses` (one of STATUSES per answer)."""
    return Scores(grade_batch(responses, ground_truths, kind, pool=pool, grader=grader))
