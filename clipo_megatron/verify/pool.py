# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Batch grading in worker processes, with a per-answer timeout that works.

Why processes: math-verify's timeouts use `signal.alarm`, which raises in
threads, and sympy can spin for minutes on adversarial answers. Each worker
grades in its main thread under its *own* `signal.setitimer` alarm (math-verify's
alarms are switched off so they do not overwrite it): a slow answer becomes
verdict 0.0 with status "timeout" and the worker carries on. A worker stuck
where signals cannot reach it (inside C code) is caught by a hard deadline on
the whole batch: the pool is killed and rebuilt, unfinished answers get status
"killed". Start method: forkserver (spawn where it is missing), never fork --
forking a process with torch threads running can deadlock.

    verify_batch(responses, ground_truths, "math") -> [1.0, 0.0, ...]
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from dataclasses import dataclass

KINDS = ("math", "mc")


@dataclass(frozen=True)
class Verdict:
    score: float  # 1.0 correct, 0.0 otherwise
    status: str  # "ok" | "timeout" | "error: <message>" | "killed"


def _quiet_math_verify() -> None:
    """math-verify logs a warning on every call made with its timeouts off; ours replaces them."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)


def grade_one(response: str, ground_truth: str, kind: str) -> float:
    """The verdict of one response, in this process, without any timeout."""
    _quiet_math_verify()
    if kind == "mc":
        from clipo_megatron.verify.choice import verify_choice

        return verify_choice(response, ground_truth)
    if kind == "math":
        from clipo_megatron.verify.math import verify_math

        return verify_math(response, ground_truth, timeout_seconds=None)
    raise ValueError(f"unknown answer kind {kind!r}; expected one of {KINDS}")


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):  # pragma: no cover - runs in worker processes
    raise _Timeout()


def _grade_chunk(
    items: list[tuple[str, str, str]], timeout: float, grader: Callable[[str, str, str], float]
) -> list[Verdict]:
    """Worker side: grade each item under its own alarm (this is the worker's main thread)."""
    signal.signal(signal.SIGALRM, _on_alarm)
    out = []
    for response, gt, kind in items:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            out.append(Verdict(float(grader(response, gt, kind)), "ok"))
        except _Timeout:
            out.append(Verdict(0.0, "timeout"))
        except Exception as e:  # a malformed answer is a wrong answer, not a crash
            out.append(Verdict(0.0, f"error: {type(e).__name__}: {e}"[:200]))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return out


def _warm() -> int:
    """Import math-verify (and sympy) once per worker, before the first timed answer."""
    import math_verify  # noqa: F401

    _quiet_math_verify()
    return os.getpid()


class VerifierPool:
    """Worker processes grading (response, ground truth, kind) triples; reuse one for many batches."""

    def __init__(
        self,
        workers: int | None = None,
        *,
        timeout: float = 10.0,
        grader: Callable[[str, str, str], float] = grade_one,
        chunk_size: int = 32,
        slack: float = 5.0,
    ):
        if timeout <= 0:
            raise ValueError(f"timeout={timeout} must be > 0 seconds")
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self.timeout = timeout
        self.grader = grader
        self.chunk_size = chunk_size
        self.slack = slack  # seconds added to a batch's hard deadline
        self._ctx = mp.get_context(
            "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        )
        self._ex: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._ex is None:
            self._ex = ProcessPoolExecutor(self.workers, mp_context=self._ctx)
            wait(
                [self._ex.submit(_warm) for _ in range(self.workers)]
            )  # start-up outside the deadlines
        return self._ex

    def _kill(self) -> None:
        """Terminate every worker (a hung one ignores polite shutdown) and forget the executor."""
        if self._ex is None:
            return
        for p in list(getattr(self._ex, "_processes", {}).values()):
            p.kill()
        self._ex.shutdown(wait=False, cancel_futures=True)
        self._ex = None

    def close(self) -> None:
        if self._ex is not None:
            self._ex.shutdown(wait=True, cancel_futures=True)
            self._ex = None

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def grade(
        self,
        responses: Sequence[str],
        ground_truths: Sequence[str],
        kinds: str | Sequence[str] = "math",
    ) -> list[Verdict]:
        """Verdicts in input order. Never raises for a bad answer; raises ValueError for bad arguments."""
        kinds = [kinds] * len(responses) if isinstance(kinds, str) else list(kinds)
        if not len(responses) == len(ground_truths) == len(kinds):
            raise ValueError(
                f"{len(responses)} responses, {len(ground_truths)} ground truths, {len(kinds)} kinds"
            )
        bad = sorted({k for k in kinds if k not in KINDS})
        if bad:
            raise ValueError(f"unknown answer kind(s) {bad}; expected one of {KINDS}")
        if not responses:
            return []
        items = [(str(r), str(g), k) for r, g, k in zip(responses, ground_truths, kinds)]
        size = max(1, min(self.chunk_size, -(-len(items) // self.workers)))
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        ex = self._executor()
        futures = [ex.submit(_grade_chunk, c, self.timeout, self.grader) for c in chunks]
        # Every item may use its full timeout, the chunks share `workers` processes; plus slack.
        rounds = -(-len(chunks) // self.workers)
        done, pending = wait(futures, timeout=rounds * size * self.timeout * 1.5 + self.slack)
        out: list[Verdict] = []
        for f, c in zip(futures, chunks):
            if f in done and f.exception() is None:
                out += f.result()
            else:
                out += [Verdict(0.0, "killed")] * len(c)
        if pending or any(f.exception() is not None for f in done):
            self._kill()  # a worker ignored its alarm (stuck in C) or died: start afresh next batch
        return out


_SHARED: VerifierPool | None = None
_SHARED_LOCK = threading.Lock()


def shared_pool() -> VerifierPool:
    """One process-wide pool, started on first use (start-up ~1-2 s, then reused)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = VerifierPool()
        return _SHARED


def verify_batch(
    responses: Sequence[str],
    ground_truths: Sequence[str],
    kind: str | Sequence[str] = "math",
    *,
    pool: VerifierPool | None = None,
) -> list[float]:
    """Binary rewards (1.0 / 0.0) for a batch: `kind` is "math" (\\boxed{} + math-verify) or "mc"
    (option letter), one for all or one per response. Safe to call from any thread."""
    return [v.score for v in (pool or shared_pool()).grade(responses, ground_truths, kind)]
