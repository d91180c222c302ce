# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A run's written outputs: the per-step `metrics.jsonl` and the final results.json / results.md."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from clipo_megatron.runner.config import RunConfig
from clipo_megatron.runner.run import STAGES


def run_label(cfg: RunConfig) -> str:
    """e.g. "grpo + CLIPO" or "dapo" (CLIPO off)."""
    return f"{cfg.clipo.objective} + CLIPO" if cfg.clipo.enabled else cfg.clipo.objective


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


def eval_rows(cfg: RunConfig, before: dict, after: dict) -> list[str]:
    """results.md rows of both held-out sets, before and after training (what was measured)."""
    t, rows = cfg.eval.temperature, []
    for key, name in (("pass@1", "held-out"), ("pass@1_perturbed", "perturbed held-out")):
        for when, res in (("before", before), ("after", after)):
            if key in res:
                size = res["problems" if key == "pass@1" else "perturbed_problems"]
                rows.append(
                    f"| {name} pass@1 {when} ({size} x n={res['n']}, T={t}) | {res[key]:.3f} |"
                )
    if "samples_per_s" in after:
        rows.append(f"| eval throughput (samples/s) | {after['samples_per_s']:.1f} |")
    return rows


def write_results(
    out: Path, cfg: RunConfig, history: list[dict], before: dict, after: dict
) -> None:
    h = history
    k = max(1, len(h) // 4)
    first = sum(x["reward/mean"] for x in h[:k]) / k
    last = sum(x["reward/mean"] for x in h[-k:]) / k
    steps_t = {s: sum(x[f"time/{s}"] for x in h) / len(h) for s in STAGES}
    res = {
        "objective": cfg.clipo.objective,
        "clipo": cfg.clipo.enabled,
        "steps": len(h),
        "train_reward_first_quarter": first,
        "train_reward_last_quarter": last,
        "eval_before": before,
        "eval_after": after,
        "mean_step_seconds": steps_t,
    }
    lines = [
        f"# {run_label(cfg)} on {cfg.data.dataset} ({cfg.model.source}), {len(h)} steps",
        "",
        "| metric | value |",
        "|---|---|",
        f"| train reward, first quarter of steps | {first:.3f} |",
        f"| train reward, last quarter of steps | {last:.3f} |",
    ]
    lines += eval_rows(cfg, before, after)
    lines.append(
        "| mean step time (s): "
        + " / ".join(STAGES)
        + " | "
        + " / ".join(f"{steps_t[s]:.1f}" for s in STAGES)
        + " |"
    )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    # Last, and atomically: a results.json marks a finished run (`clipo-megatron compare` skips it).
    tmp = out / "results.json.tmp"
    tmp.write_text(dumps(res, indent=2))
    tmp.replace(out / "results.json")
