# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A broken `checkpoints/latest.pt` is refused before any model loads, in one line naming the
file and the fix (it used to end the run with a traceback after the model and engine load)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("omegaconf")

from clipo_megatron.output_folder import claim_output_folder  # noqa: E402
from clipo_megatron.reporting.compare_report import run_dir  # noqa: E402
from clipo_megatron.runner import compare, train  # noqa: E402
from clipo_megatron.runner.checkpoint import check_readable, checkpoint_path  # noqa: E402

from .faults import ModelBuilt  # noqa: E402  (`no_model`: tests/runner/conftest.py)


def _state() -> dict:
    torch.manual_seed(0)
    w = torch.randn(64, 64)
    return {"format_version": 1, "step": 3, "policy": {"w": w}, "history": [{"step": 1}]}


def _claimed(ckpt):
    """The run folder of `ckpt` marked as a train run's, as `train` marks it."""
    claim_output_folder(ckpt.parent.parent, kind="train", key="output.dir")
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    return ckpt


def _write(path, how: str):
    """A checkpoint broken in one way: garbage, truncated, a flipped byte, empty, not a run's."""
    _claimed(path)
    if how == "garbage":
        path.write_bytes(b"this is not a checkpoint\n" * 40)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "not_a_run":
        torch.save([1, 2, 3], path)
    else:
        torch.save(_state(), path)
        data = bytearray(path.read_bytes())
        if how == "truncated":
            data = data[: len(data) // 2]
        else:  # flipped: one byte of the tensor data changed, the file's length kept
            i = bytes(data).index(b"data/0") + 200  # inside the tensor's 16 KB, past its header
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
    return path


KINDS = ["garbage", "empty", "truncated", "flipped", "not_a_run"]


@pytest.mark.parametrize("version", [None, 2])
def test_a_checkpoint_of_another_format_version_is_refused(tmp_path, capsys, no_model, version):
    """One layout of latest.pt (`format_version` 1): no older layout is read."""
    out = tmp_path / "run"
    ckpt = _claimed(checkpoint_path(out))
    state = {k: v for k, v in _state().items() if k != "format_version"}
    torch.save(state if version is None else {**state, "format_version": version}, ckpt)
    with pytest.raises(SystemExit) as e:
        train.main([f"output.dir={out}"])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    what = "no format version" if version is None else "format version 2"
    assert line == (
        f"clipo-megatron train: error: checkpoint {ckpt} has {what}; this clipo_megatron reads "
        "version 1 only: delete it to start over, or point output.dir elsewhere"
    )


@pytest.mark.parametrize("how", KINDS)
def test_train_refuses_a_broken_checkpoint_before_the_model_loads(tmp_path, capsys, no_model, how):
    out = tmp_path / "run"
    ckpt = _write(checkpoint_path(out), how)
    with pytest.raises(SystemExit) as e:
        train.main([f"output.dir={out}"])
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"clipo-megatron train: error: checkpoint {ckpt} is unreadable (")
    assert lines[0].endswith("): delete it to start over, or point output.dir elsewhere")


def test_a_sound_checkpoint_passes_and_the_run_goes_on_to_build(tmp_path, no_model):
    out = tmp_path / "run"
    ckpt = _claimed(checkpoint_path(out))
    torch.save(_state(), ckpt)
    check_readable(ckpt)  # no error
    with pytest.raises(ModelBuilt):  # past the preflight: the run is built next
        train.main([f"output.dir={out}"])


def test_compare_refuses_a_broken_checkpoint_of_a_run_it_would_resume(tmp_path, capsys, no_model):
    out = tmp_path / "cmp"
    claim_output_folder(out, kind="compare", key="--out")
    ckpt = _write(checkpoint_path(run_dir(out, "grpo", "baseline", 0)), "truncated")
    with pytest.raises(SystemExit) as e:
        compare.main(["--objectives", "grpo", "--out", str(out)])
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"checkpoint {ckpt} is unreadable (" in lines[0]


def test_eval_run_refuses_a_broken_checkpoint_before_the_model_loads(tmp_path, capsys, no_model):
    import json

    from clipo_megatron.runner import heldout
    from clipo_megatron.runner.config import load_config, to_dict

    out = tmp_path / "run"
    ckpt = _write(checkpoint_path(out), "flipped")
    (out / "config.json").write_text(json.dumps(to_dict(load_config(None, []))))
    with pytest.raises(SystemExit) as e:
        heldout.main(["--run", str(out)])
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"clipo-megatron eval: error: checkpoint {ckpt} is unreadable (")
