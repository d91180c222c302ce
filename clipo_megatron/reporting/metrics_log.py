# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A run's per-step log, `metrics.jsonl`: strict JSON written line by line, read back for the
reports, and trimmed on a resume so no step is logged twice."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def strict(obj):
    """`obj` with every non-finite float (NaN, +-inf) as None, so it dumps as strict JSON (null);
    a bare `NaN` is not JSON, and strict readers (jq, JSON.parse, Go, Rust) refuse the file."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def dumps(obj, **kw) -> str:
    """Strict JSON (null for a non-finite value; `allow_nan=False` catches anything missed)."""
    return json.dumps(strict(obj), allow_nan=False, **kw)


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl's rows, null read back as NaN (a gap in a curve, as the run had it)."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [{k: float("nan") if v is None else v for k, v in r.items()} for r in rows]


class MetricsLogError(RuntimeError):
    """A metrics.jsonl row could not be written (a full disk, a quota, an I/O error)."""


def open_append(path: Path):
    """The unbuffered raw file the log appends to (a test's fault injection point: the disk)."""
    return path.open("ab", buffering=0)


class MetricsLog:
    """metrics.jsonl, one strict-JSON line per step, appended with unbuffered writes: a write
    the disk refuses raises `MetricsLogError` (one line naming the file and the OS's reason)
    at once, and nothing is left in a buffer for close() to fail on again. A line torn by
    the failure is dropped by the resume (`trim_metrics_log`)."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open_append(path)

    def write(self, row: dict) -> None:
        data = (dumps(row) + "\n").encode()
        try:
            while data:
                data = data[self._f.write(data) :]
        except OSError as e:
            raise MetricsLogError(f"cannot write {self.path}: {e.strerror or e}") from None

    def close(self) -> None:
        self._f.close()


def _row_step(line: str) -> int | None:
    """The step of one metrics.jsonl line, None if it is not a row (not JSON, no step)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) else None


def trim_metrics_log(path: Path, from_step: int) -> None:
    """Drop the lines of steps >= `from_step` (re-run after a resume), so no step is logged twice.

    A last line that does not parse is a write torn by a kill or a full disk: dropped with a
    warning, so the rerun goes on. An unparsable line before the last is not a torn write:
    ValueError naming file:line, nothing rewritten.
    """
    if not path.exists():
        return
    raw = path.read_text(errors="replace").splitlines()
    numbered = [(n, x) for n, x in enumerate(raw, 1) if x.strip()]
    steps = [_row_step(x) for _, x in numbered]
    if numbered and steps[-1] is None:
        n = numbered[-1][0]
        print(
            f"[clipo-megatron] warning: {path}:{n}: dropped a torn last line (a write cut short "
            "by a kill or a full disk)",
            file=sys.stderr,
        )
        numbered, steps = numbered[:-1], steps[:-1]
    bad = next((n for (n, _), s in zip(numbered, steps) if s is None), None)
    if bad is not None:
        raise ValueError(
            f"{path}:{bad}: not a metrics row (JSON with an integer 'step'); "
            "delete the line (or the file) and rerun"
        )
    kept = [x for (_, x), s in zip(numbered, steps) if s is not None and s < from_step]
    if len(kept) != len(raw):
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(x + "\n" for x in kept))
        tmp.replace(path)
