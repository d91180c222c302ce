# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Loading a checkpoint never runs code (issue 24 item 1).

A crafted `latest.pt` whose pickle calls `exec` (it would write a marker file) is refused in
one line naming the file, by `train` (resume) and `eval --run`, before any model loads, and
the marker is never written; so are the eval package's and the NeMo-RL CPU worker's loads.
A checkpoint written by the runner loads weights-only and equals what was saved.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("omegaconf")

from clipo_megatron.core.safe_load import UnsafeCheckpoint, load_state  # noqa: E402
from clipo_megatron.output_folder import claim_output_folder  # noqa: E402
from clipo_megatron.runner import heldout, train  # noqa: E402
from clipo_megatron.runner.checkpoint import (  # noqa: E402
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
)
from clipo_megatron.runner.config import load_config, to_dict  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[2] / "clipo_megatron"


class _Payload:
    """Unpickling this calls exec(code): with weights_only=False it writes `marker`."""

    def __init__(self, marker: Path):
        self.code = f"open({str(marker)!r}, 'w').write('ran')"

    def __reduce__(self):
        return (exec, (self.code,))


def _crafted(path: Path, marker: Path, *, legacy: bool = False) -> Path:
    """A file shaped like a run checkpoint (a dict with 'step') that runs code when loaded."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"format_version": 1, "step": 3, "policy": {"w": torch.zeros(2)}}
    state["history"] = [_Payload(marker)]
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    return path


def _run_checkpoint(out: Path) -> Path:
    """A train run's checkpoint path, its folder marked as `train` marks it."""
    claim_output_folder(out, kind="train", key="output.dir")
    return checkpoint_path(out)


def _one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_the_crafted_file_does_run_code_without_the_safe_loader(tmp_path):
    """The fixture is real: torch.load(weights_only=False) writes the marker."""
    marker = tmp_path / "marker"
    torch.load(_crafted(tmp_path / "x.pt", marker), weights_only=False)
    assert marker.read_text() == "ran"


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_the_safe_loader_refuses_it_naming_the_file_and_the_callable(tmp_path, legacy):
    marker = tmp_path / "marker"
    path = _crafted(tmp_path / "x.pt", marker, legacy=legacy)
    with pytest.raises(UnsafeCheckpoint) as e:
        load_state(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"checkpoint {path} refused: it pickles `")
    assert "exec" in msg
    assert not marker.exists()


def test_train_resume_refuses_it_before_the_model_loads(tmp_path, capsys, no_model):
    out, marker = tmp_path / "run", tmp_path / "marker"
    ckpt = _crafted(_run_checkpoint(out), marker)
    with pytest.raises(SystemExit) as e:
        train.main([f"output.dir={out}"])
    assert e.value.code == 2
    line = _one_line(capsys)
    assert line.startswith(f"clipo-megatron train: error: checkpoint {ckpt} refused: it pickles")
    assert line.endswith("or point output.dir elsewhere")
    assert not marker.exists()


def test_eval_run_refuses_it_before_the_model_loads(tmp_path, capsys, no_model):
    out, marker = tmp_path / "run", tmp_path / "marker"
    ckpt = _crafted(_run_checkpoint(out), marker)
    (out / "config.json").write_text(json.dumps(to_dict(load_config(None, []))))
    with pytest.raises(SystemExit) as e:
        heldout.main(["--run", str(out)])
    assert e.value.code == 2
    assert _one_line(capsys).startswith(f"clipo-megatron eval: error: checkpoint {ckpt} refused")
    assert not marker.exists()


def test_the_eval_package_refuses_it(tmp_path, monkeypatch):
    """`eval --suite ... --model <run dir>` reads the run's checkpoint in eval/generator.py."""
    from clipo_megatron.eval import generator

    monkeypatch.setattr(
        "clipo_megatron.models.hf_policy.load_hf_policy", lambda *a, **k: (None, None)
    )
    out, marker = tmp_path / "run", tmp_path / "marker"
    _crafted(_run_checkpoint(out), marker)
    (out / "config.json").write_text(json.dumps(to_dict(load_config(None, []))))
    with pytest.raises(UnsafeCheckpoint):
        generator._load_train_run(out)
    assert not marker.exists()


def test_every_load_goes_through_the_one_safe_loader():
    """No `torch.load` in the package outside core/safe_load.py (a new one would bypass it)."""
    found = [
        f"{p.relative_to(PACKAGE)}:{i}"
        for p in PACKAGE.rglob("*.py")
        if p.name != "safe_load.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\btorch\.load\(|weights_only\s*=\s*False", line)
    ]
    assert found == []


class _FakeRun:
    def __init__(self, state: dict):
        self.state = state

    def state_dict(self) -> dict:
        return self.state


def _genuine_state() -> dict:
    """What `Run.state_dict` holds, built from real torch objects: a policy state dict,
    AdamW state after a step, the RNG bytes, metrics with NaN / str, the config as a dict."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    head = torch.nn.Linear(3, 2, bias=False)
    hopt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    return {
        "step": 4,
        "policy": model.state_dict(),
        "optimizer": {
            "state_by_name": {str(i): s for i, s in opt.state_dict()["state"].items()},
            "param_groups": opt.state_dict()["param_groups"],
        },
        "head": {"head": head.state_dict(), "optimizer": hopt.state_dict(), "steps_done": 4},
        "history": [{"step": 0, "pg/loss": float("nan"), "rollout/token_hash": "ab12"}],
        "embeddings": {"end": {"emb": torch.randn(3, 2), "step": 3}},
        "torch_rng": torch.get_rng_state(),
        "config": to_dict(load_config(None, [])),
    }


def _same(a, b) -> bool:
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


def test_a_runner_checkpoint_round_trips_weights_only(tmp_path, monkeypatch):
    """save_checkpoint's file loads with weights_only=True and equals the saved state."""
    monkeypatch.setattr("clipo_megatron.runner.checkpoint.barrier", lambda: None)
    state, path = _genuine_state(), checkpoint_path(tmp_path)
    save_checkpoint(_FakeRun(state), path)
    assert _same(load_checkpoint(path), {"format_version": 1, **state})
    assert not path.with_suffix(".tmp").exists()
