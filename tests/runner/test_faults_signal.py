# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Fault class: a stop signal (issue 43, items 1 and 5, the runner's half).

SIGTERM is what Slurm sends at a time limit (`--signal=TERM@<secs>`, or the limit itself) and on
preemption. The runner used to stop after the step and save nothing there: a rerun went back to
the last periodic checkpoint (up to `output.checkpoint_every` steps lost). Now it finishes the
step, writes a checkpoint there and exits 143; the same command resumes there and ends where an
uninterrupted run ends. The attacks: a signal during the checkpoint write, two signals, a full
disk at the signal. The loop under test is `train`'s own, on a `FakeRun` (no model); the real
model's bit-exact resume is `test_train_e2e.py::test_sigterm_saves_where_it_stops_and_resumes_bit_exact`.
"""

from __future__ import annotations

import errno
import os
import signal

import pytest
import torch

pytest.importorskip("omegaconf")

from clipo_megatron.runner import checkpoint, train  # noqa: E402
from clipo_megatron.runner.checkpoint import checkpoint_path, load_checkpoint  # noqa: E402

from .faults import QUIET, FakeRun, strict_rows  # noqa: E402

RARE = "output.checkpoint_every=100"  # no periodic save in these runs but the last step's


def _argv(out, steps: int, *extra: str) -> list[str]:
    return [*QUIET, RARE, f"train.steps={steps}", f"output.dir={out}", *extra]


class SignalledRun(FakeRun):
    """A `FakeRun` that receives `signals[k]` SIGTERMs at the start of step k (mid-step, as a
    Slurm signal arrives)."""

    signals: dict[int, int] = {}

    def step(self) -> dict:
        for _ in range(SignalledRun.signals.get(self.step_idx, 0)):
            os.kill(os.getpid(), signal.SIGTERM)  # a second one raises here: the step abandoned
        return super().step()


@pytest.fixture
def signalled(monkeypatch, fake_run):
    SignalledRun.signals = {}
    monkeypatch.setattr("clipo_megatron.runner.run.Run", SignalledRun)
    return SignalledRun


def _numbers(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _stderr_line(capsys, start: str) -> str:
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith(start)]
    return line


def test_sigterm_finishes_the_step_saves_there_and_the_rerun_matches(tmp_path, capsys, signalled):
    a, b = tmp_path / "a", tmp_path / "b"
    assert train.main(_argv(a, 5)) == 0  # uninterrupted

    signalled.signals = {2: 1}  # SIGTERM during step 2
    assert train.main(_argv(b, 5)) == 128 + signal.SIGTERM
    assert _stderr_line(capsys, "stopped at") == (
        "stopped at step 3 (checkpoint written there); rerun the same command to resume from step 3"
    )
    state = load_checkpoint(checkpoint_path(b))
    assert state["step"] == 3 and state["policy"]["w"].tolist() == [3.0, 3.0]

    signalled.signals = {}
    assert train.main(_argv(b, 5)) == 0  # the same command: resumes at step 3
    assert "resumed from" in capsys.readouterr().out
    assert signalled.built[-1].step_idx == 5
    assert _numbers(strict_rows(b / "metrics.jsonl")) == _numbers(strict_rows(a / "metrics.jsonl"))
    end_a, end_b = load_checkpoint(checkpoint_path(a)), load_checkpoint(checkpoint_path(b))
    assert torch.equal(end_a["policy"]["w"], end_b["policy"]["w"])
    assert repr(_numbers(end_a["history"])) == repr(_numbers(end_b["history"]))  # NaN as text


def test_a_signal_before_the_first_step_writes_nothing(tmp_path, capsys, signalled):
    """Nothing trained, nothing to save: the rerun starts afresh (no empty checkpoint)."""
    out = tmp_path / "run"
    out.mkdir()
    with train.StopSignals() as stop:  # the signal lands before step 0
        os.kill(os.getpid(), signal.SIGTERM)
        from clipo_megatron.runner.config import load_config

        cfg = load_config(None, _argv(out, 3))
        assert train._train(SignalledRun(cfg), cfg, stop) == 143
    assert not checkpoint_path(out).exists()
    assert "resume from step 0" in _stderr_line(capsys, "stopped at")


def _signal_inside_save(monkeypatch, on_call: int, count: int) -> list[int]:
    """`count` SIGTERMs inside the `on_call`-th checkpoint write (torch.save), before any byte."""
    calls: list[int] = []
    real = checkpoint.torch.save

    def save(obj, f):
        calls.append(obj["step"])
        if len(calls) == on_call:
            for _ in range(count):
                os.kill(os.getpid(), signal.SIGTERM)
        return real(obj, f)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    return calls


def test_a_signal_during_a_periodic_write_lets_it_finish_and_stops_there(
    tmp_path, capsys, monkeypatch, signalled
):
    out = tmp_path / "run"
    calls = _signal_inside_save(monkeypatch, on_call=2, count=1)  # inside step 2's save
    assert train.main(_argv(out, 5, "output.checkpoint_every=1")) == 143
    assert calls == [1, 2]  # the write finished; no second save of the same step
    assert load_checkpoint(checkpoint_path(out))["step"] == 2
    assert not checkpoint_path(out).with_suffix(".tmp").exists()
    assert "resume from step 2" in _stderr_line(capsys, "stopped at")


def test_a_second_signal_during_the_stop_save_keeps_the_previous_checkpoint(
    tmp_path, capsys, monkeypatch, signalled
):
    out = tmp_path / "run"
    assert train.main(_argv(out, 2)) == 0  # a checkpoint at step 2 (the last step's)
    before = checkpoint_path(out).read_bytes()
    signalled.signals = {3: 1}  # stop at step 4 ...
    _signal_inside_save(monkeypatch, on_call=1, count=1)  # ... and signal again inside that save
    assert train.main(_argv(out, 6)) == 143
    assert _stderr_line(capsys, "stopped at") == (
        "stopped at step 4 (step abandoned); rerun the same command to resume from step 2"
    )
    assert checkpoint_path(out).read_bytes() == before  # the old file, byte for byte
    assert not checkpoint_path(out).with_suffix(".tmp").exists()
    monkeypatch.setattr(checkpoint.torch, "save", torch.save)
    signalled.signals = {}
    assert train.main(_argv(out, 6)) == 0
    assert [r["step"] for r in strict_rows(out / "metrics.jsonl")] == list(range(6))


def test_two_signals_in_a_step_abandon_it(tmp_path, capsys, signalled):
    out = tmp_path / "run"
    signalled.signals = {1: 2}  # two SIGTERMs during step 1: the second abandons it
    assert train.main(_argv(out, 4)) == 143
    assert _stderr_line(capsys, "stopped at") == (
        "stopped at step 1 (step abandoned); rerun the same command to resume from step 0"
    )
    assert not checkpoint_path(out).exists()  # step 0 was never saved (no periodic save)
    assert [r["step"] for r in strict_rows(out / "metrics.jsonl")] == [0]


def test_a_full_disk_at_the_signal_is_one_line_and_keeps_the_old_checkpoint(
    tmp_path, capsys, monkeypatch, signalled
):
    out = tmp_path / "run"
    assert train.main(_argv(out, 1)) == 0
    before = checkpoint_path(out).read_bytes()
    real = checkpoint.torch.save

    def full(obj, f):  # half a file, then ENOSPC
        if obj["step"] == 3:
            f.write(b"PK\x03\x04 half")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, f)

    monkeypatch.setattr(checkpoint.torch, "save", full)
    signalled.signals = {2: 1}
    assert train.main(_argv(out, 5)) == 1
    ckpt = checkpoint_path(out)
    assert _stderr_line(capsys, "clipo-megatron train: error:") == (
        f"clipo-megatron train: error: checkpoint {ckpt} not written: no space left on device "
        "(ENOSPC, latest.tmp removed, the previous checkpoint kept); free space and rerun the "
        "same command to resume from step 1"
    )
    assert ckpt.read_bytes() == before and not ckpt.with_suffix(".tmp").exists()
