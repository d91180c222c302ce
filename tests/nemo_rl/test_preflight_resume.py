# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The preflight catches a resume whose CLIPO files would fail after the policy loads: one line
naming the path and the fix. Before `preflight_resume`, each of these said `preflight OK`."""

from __future__ import annotations

import json

import pytest
import torch

from clipo_megatron.nemo_rl.guard import preflight as pf
from clipo_megatron.nemo_rl.guard.preflight_resume import check_resume_clipo

HIDDEN = 64


def _config(tmp_path, **clipo):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({
        "num_attention_heads": 4, "num_hidden_layers": 2, "hidden_size": HIDDEN, "vocab_size": 96,
    }))  # fmt: skip
    return {
        "policy": {"model_name": str(model)},
        "checkpointing": {"checkpoint_dir": str(tmp_path / "ckpt")},
        "clipo": {"enabled": True, "method": {"embed_dim": 16}, **clipo},
    }


def _head(tmp_path, *, embed_dim=16, hidden=HIDDEN, extra=None, mlp=False, version=1):
    head = {"proj.weight": torch.zeros(embed_dim, hidden)}
    if mlp:
        head["hidden.0.weight"] = torch.zeros(hidden, hidden)
    trainer = {"head": head, "optimizer": {"state": {}, "param_groups": []}, "steps_done": 3}
    path = tmp_path / "ckpt" / "step_3" / "clipo_head" / "head.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"trainer": trainer, "extra": {"step": 3} if extra is None else extra}
    if version is not None:
        payload["format_version"] = version
    torch.save(payload, path)
    return path


def _problems(config):
    return check_resume_clipo(config)[0]


def test_a_good_head_and_no_resume_pass(tmp_path):
    cfg = _config(tmp_path)
    assert _problems(cfg) == []  # no checkpoint dir: nothing to resume
    _head(tmp_path)
    assert _problems(cfg) == []


@pytest.mark.parametrize("version", [None, 2])
def test_a_head_of_another_format_version(tmp_path, version):
    path = _head(tmp_path, version=version)
    (p,) = _problems(_config(tmp_path))
    what = "no format version" if version is None else "format version 2"
    assert f"{path} has {what}; this clipo_megatron reads version 1 only" in p
    assert "clipo.enabled=false" in p


def test_per_rank_head_files_of_an_earlier_layout_are_not_a_head(tmp_path):
    path = _head(tmp_path)
    path.rename(path.with_name("head_tp0.pt"))
    (p,) = _problems(_config(tmp_path))
    assert f"no CLIPO head at {path}" in p


def test_a_checkpoint_saved_with_clipo_off(tmp_path):
    (tmp_path / "ckpt" / "step_2" / "policy").mkdir(parents=True)
    (p,) = _problems(_config(tmp_path))
    assert "no CLIPO head at" in p and "step_2/clipo_head/head.pt" in p
    assert "clipo.enabled=false" in p


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated", b"not a checkpoint"])
def test_an_unreadable_head(tmp_path, content):
    path = _head(tmp_path)
    path.write_bytes(content)
    (p,) = _problems(_config(tmp_path))
    assert f"the CLIPO head {path} is unreadable" in p and "delete" in p


@pytest.mark.parametrize(
    "saved, want",
    [
        (dict(embed_dim=32), "clipo.method.embed_dim: saved 32, recipe 16"),
        (dict(hidden=128), "the model's hidden size: saved 128, recipe 64"),
        (dict(mlp=True), "clipo.method.head_type: saved mlp, recipe linear"),
    ],
)
def test_a_head_of_another_shape(tmp_path, saved, want):
    path = _head(tmp_path, **saved)
    (p,) = _problems(_config(tmp_path))
    assert f"{path} holds a head of another shape" in p and want in p


def test_no_run_state(tmp_path):
    path = _head(tmp_path, extra={})
    (p,) = _problems(_config(tmp_path))
    assert f"{path} holds no CLIPO run state" in p


def test_the_baseline_run_state_and_an_ignored_head(tmp_path):
    path = _head(tmp_path)
    cfg = _config(tmp_path, enabled=False)
    problems, warnings = check_resume_clipo(cfg)
    assert problems == [] and "holds a CLIPO head but clipo.enabled=false" in warnings[0]
    (path.parents[1] / "clipo_run_state.json").write_text("{not json")
    (p,) = _problems(cfg)
    assert "clipo_run_state.json: not a CLIPO run state" in p


def test_the_preflight_reports_it(tmp_path):
    """Wired into `preflight_config`: the report is not OK (the driver exits 2 before Ray)."""
    (tmp_path / "ckpt" / "step_2").mkdir(parents=True)
    report = pf.preflight_config(_config(tmp_path), cluster_env=False)
    assert any("no CLIPO head at" in p for p in report.problems)
