# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`train` and `compare` never write into a folder that is not theirs: an HF model's folder (or
a symlink to one) given as `output.dir` used to be written into, exit 0, its `config.json`
replaced and a foreign `metrics.jsonl` line dropped as "a torn last line"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.output_folder import MARKER  # noqa: E402
from clipo_megatron.runner import compare, train  # noqa: E402

from .faults import QUIET, ModelBuilt, refused  # noqa: E402


def _users_folder(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "llama", "hidden_size": 576}')
    (d / "metrics.jsonl").write_text('{"loss": 1.0}\n{"loss": 0.5')  # the user's, "torn"
    (d / "model.safetensors").write_bytes(b"weights")
    return d


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("via_symlink", [False, True], ids=["folder", "symlink"])
def test_train_refuses_a_users_folder_and_leaves_it_alone(via_symlink, tmp_path, capsys, no_model):
    hf = _users_folder(tmp_path / "my_model")
    before = _snapshot(hf)
    out = hf
    if via_symlink:
        out = tmp_path / "link"
        os.symlink(hf, out)
    line = refused(capsys, lambda: train.main([f"output.dir={out}", *QUIET]))
    assert f"output.dir={out} already holds files (config.json, metrics.jsonl, " in line
    assert "not an output of clipo-megatron" in line and "choose a new or empty folder" in line
    assert _snapshot(hf) == before


def test_train_refuses_a_folder_of_another_command(tmp_path, capsys, no_model):
    d = tmp_path / "evals"
    d.mkdir()
    (d / MARKER).write_text(json.dumps({"format_version": 1, "kind": "eval"}))
    (d / "results.json").write_text("{}")
    line = refused(capsys, lambda: train.main([f"output.dir={d}", *QUIET]))
    assert "is a `clipo-megatron eval` output" in line


@pytest.mark.parametrize("version", [None, 2])
def test_a_marker_of_another_format_version_is_refused(version, tmp_path, capsys, no_model):
    """One marker layout is read; an older run's folder (no version) is not guessed at."""
    d = tmp_path / "run"
    d.mkdir()
    marker = {"kind": "train"} if version is None else {"format_version": 2, "kind": "train"}
    (d / MARKER).write_text(json.dumps(marker))
    (d / "checkpoints").mkdir()
    line = refused(capsys, lambda: train.main([f"output.dir={d}", *QUIET]))
    what = "no format version" if version is None else "format version 2"
    assert f"output.dir={d}: {d / MARKER} has {what}; this clipo_megatron reads version 1" in line
    assert "choose a new or empty folder" in line


def test_a_run_folder_without_a_marker_is_not_ours(tmp_path, capsys, no_model):
    """The files a train run writes do not stand in for the marker (no older layout is read)."""
    d = tmp_path / "run"
    (d / "checkpoints").mkdir(parents=True)
    (d / "checkpoints" / "latest.pt").write_bytes(b"")
    (d / "config_history.jsonl").write_text("{}\n")
    line = refused(capsys, lambda: train.main([f"output.dir={d}", *QUIET]))
    assert "not an output of clipo-megatron" in line


def test_the_run_lock_alone_is_not_a_foreign_file():
    """A train run takes its lock before it writes the marker (runner/run_dir.py)."""
    from clipo_megatron.output_folder import RUN_LOCK
    from clipo_megatron.runner.run_dir import LOCK_NAME

    assert RUN_LOCK == LOCK_NAME


def test_a_dangling_symlink_is_refused(tmp_path, capsys, no_model):
    link = tmp_path / "link"
    os.symlink(tmp_path / "gone", link)
    line = refused(capsys, lambda: train.main([f"output.dir={link}", *QUIET]))
    assert "is a symlink to nothing" in line


def test_train_marks_a_new_or_empty_folder_and_reruns_into_its_own(tmp_path, no_model):
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        with pytest.raises(ModelBuilt):
            train.main([f"output.dir={out}", *QUIET])
        assert json.loads((out / MARKER).read_text()) == {"format_version": 1, "kind": "train"}
        with pytest.raises(ModelBuilt):  # its own folder: the rerun goes on
            train.main([f"output.dir={out}", *QUIET])


def test_compare_refuses_a_users_folder_as_out(tmp_path, capsys, no_model):
    hf = _users_folder(tmp_path / "my_model")
    before = _snapshot(hf)
    line = refused(
        capsys,
        lambda: compare.main(["--objectives", "grpo", "--out", str(hf), *QUIET]),
        prefix="clipo-megatron compare: error: ",
    )
    assert f"--out={hf} already holds files" in line
    assert _snapshot(hf) == before
