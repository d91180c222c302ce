# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Fault classes: a full disk during the metrics write (issue 24, item 6, metrics half) and
non-finite metrics (item 10).

- A write cut short left a torn last line in metrics.jsonl, and every later rerun crashed in
  `trim_metrics_log`. Now the rerun drops it with a warning and resumes; no step is lost
  or logged twice.
- ENOSPC during the write was a traceback. Now: one line naming the file, the OS's reason, the
  step and where a rerun resumes (exit 1).
- metrics.jsonl held bare NaN / Infinity (not JSON). Now: strict JSON, null for a non-finite
  value; results.json too.
The loop under test is `train`'s own, on a `FakeRun` (no model).
"""

from __future__ import annotations

import errno
import json

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.reporting import metrics_log, results  # noqa: E402
from clipo_megatron.reporting.metrics_log import read_metrics, trim_metrics_log  # noqa: E402
from clipo_megatron.runner import train  # noqa: E402
from clipo_megatron.runner.checkpoint import checkpoint_path  # noqa: E402

from .faults import QUIET, ModelBuilt, refused, strict_rows  # noqa: E402


class DiskFillsAfter:
    """The raw metrics file on a disk that holds `rows` more whole rows and then `torn` bytes:
    the write past it is cut short (a real short write), the next raises ENOSPC."""

    def __init__(self, path, rows: int, torn: int):
        self.f, self.rows, self.torn = path.open("ab", buffering=0), rows, torn

    def write(self, data: bytes) -> int:
        if self.rows > 0:
            self.rows -= 1
            return self.f.write(data)
        if self.torn <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = self.f.write(data[: self.torn])
        self.torn -= n
        return n

    def close(self) -> None:
        self.f.close()


def _argv(out, steps: int) -> list[str]:
    return [*QUIET, f"train.steps={steps}", f"output.dir={out}"]


def test_enospc_is_one_line_with_the_resume_step_and_the_rerun_loses_nothing(
    tmp_path, capsys, monkeypatch, fake_run
):
    out = tmp_path / "run"
    monkeypatch.setattr(metrics_log, "open_append", lambda p: DiskFillsAfter(p, rows=1, torn=20))
    assert train.main(_argv(out, 4)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"clipo-megatron train: error: cannot write {out / 'metrics.jsonl'}: No space left on "
        "device at step 1; free space and rerun the same command to resume from step 1"
    )
    first, torn = (out / "metrics.jsonl").read_text().split("\n")
    assert json.loads(first)["step"] == 0 and len(torn) == 20  # step 0, then a torn line
    assert not (out / "results.json").exists()

    monkeypatch.undo()  # space again (and the real Run patched back in for the rerun)
    monkeypatch.setattr("clipo_megatron.runner.run.Run", fake_run)
    assert train.main(_argv(out, 4)) == 0
    err = capsys.readouterr().err
    assert f"warning: {out / 'metrics.jsonl'}:2: dropped a torn last line" in err
    assert [r["step"] for r in strict_rows(out / "metrics.jsonl")] == [0, 1, 2, 3]
    assert fake_run.built[-1].w.tolist() == [4.0, 4.0]  # resumed at step 1: 1 + 3 updates


def test_metrics_and_results_are_strict_json_with_null_for_non_finite(tmp_path, fake_run):
    out = tmp_path / "run"
    assert train.main(_argv(out, 2)) == 0
    rows = strict_rows(out / "metrics.jsonl")  # a bare NaN / Infinity fails here
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[0]["clipo/pos_cos"] is None and rows[0]["test/inf"] is None
    assert rows[0]["test/neg_inf"] is None and rows[1]["reward/mean"] == 0.25
    json.loads((out / "results.json").read_text(), parse_constant=_no_constant)
    back = read_metrics(out / "metrics.jsonl")  # compare's reader: null back to NaN
    assert back[0]["clipo/pos_cos"] != back[0]["clipo/pos_cos"]


def _no_constant(name):
    raise AssertionError(f"bare {name}")


def test_dumps_refuses_what_it_cannot_make_strict():
    assert metrics_log.dumps({"a": [float("nan"), 1.5, {"b": float("-inf")}]}) == (
        '{"a": [null, 1.5, {"b": null}]}'
    )


def test_a_torn_last_line_is_dropped_with_a_warning(tmp_path, capsys):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 0, "x": 1}\n{"step": 1, "x": 2}\n{"step": 2, "x"')
    trim_metrics_log(log, 5)
    assert [r["step"] for r in strict_rows(log)] == [0, 1]
    assert f"{log}:3: dropped a torn last line" in capsys.readouterr().err


def test_a_broken_line_mid_file_is_refused_before_the_model_loads(tmp_path, capsys, no_model):
    out = tmp_path / "run"
    with pytest.raises(ModelBuilt):
        train.main(_argv(out, 4))
    log = out / "metrics.jsonl"
    text = '{"step": 0}\nnot json\n{"step": 1}\n'
    log.write_text(text)
    checkpoint_path(out).parent.mkdir()
    import torch

    torch.save(
        {"format_version": 1, "step": 2, "config": json.loads((out / "config.json").read_text())},
        checkpoint_path(out),
    )
    line = refused(capsys, lambda: train.main(_argv(out, 4)))
    assert line.endswith(
        f"{log}:2: not a metrics row (JSON with an integer 'step'); "
        "delete the line (or the file) and rerun"
    )
    assert log.read_text() == text  # nothing rewritten


def test_a_full_disk_before_the_run_is_one_line(tmp_path, capsys, monkeypatch, no_model):
    """config.json / the history cannot be written: one line naming the file, no model built."""
    from clipo_megatron.runner import run_dir

    out = tmp_path / "run"

    def full(path, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(path / "config.json"))

    monkeypatch.setattr(run_dir, "record_config", full)
    line = refused(capsys, lambda: train.main(_argv(out, 2)))
    assert line.endswith(
        f"output.dir={out}: cannot write {out / 'config.json'} (No space left on device): "
        "free space or choose another output.dir"
    )
    run_dir.RunLock(out).acquire().release()  # released on the way out


def test_a_full_disk_writing_the_final_outputs_is_one_line_and_a_rerun_writes_them(
    tmp_path, capsys, monkeypatch, fake_run
):
    """ENOSPC after the last step (plots, results.md / results.json) was a traceback; now one line
    saying training is checkpointed, no results.json(.tmp) left, and the rerun writes them."""
    out = tmp_path / "run"

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results, "write_results", full_disk)
    assert train.main(_argv(out, 2)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"clipo-megatron train: error: cannot write the run's outputs in {out}: No space left on "
        "device; training is checkpointed at step 2: free space and rerun the same command to "
        "write them"
    )
    assert not (out / "results.json").exists() and not (out / "results.json.tmp").exists()
    monkeypatch.undo()
    monkeypatch.setattr("clipo_megatron.runner.run.Run", fake_run)
    assert train.main(_argv(out, 2)) == 0
    json.loads((out / "results.json").read_text(), parse_constant=_no_constant)
