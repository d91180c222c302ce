# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Fault class: a resume with another config (issue 24, item 4).

Changing tau, the objective, the seed or lr used to resume silently and overwrite config.json
(the optimiser kept its old lr); a model-size change failed after the model loaded. Now the
checkpoint's config is compared before any model loads: a change is refused in one line
listing the keys (exit 2, config.json and the history untouched, no model built), unless
--allow-config-change; budget keys (train.steps) may change.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("omegaconf")

from clipo_megatron.runner import train  # noqa: E402
from clipo_megatron.runner.checkpoint import checkpoint_path  # noqa: E402
from clipo_megatron.runner.config import load_config, to_dict  # noqa: E402
from clipo_megatron.runner.run_dir import HISTORY_NAME, config_changes  # noqa: E402

from .faults import QUIET, ModelBuilt, refused  # noqa: E402


def _trained(out, *overrides) -> list[str]:
    """A run directory as a run with `overrides` leaves it after 3 steps: its config.json,
    history line and checkpoint (the checkpoint's config is what a resume is checked against)."""
    argv = [*QUIET, f"output.dir={out}", *overrides]
    with pytest.raises(ModelBuilt):  # a fresh run: claims the directory, then builds
        train.main(argv)
    cfg = load_config(None, argv)
    ckpt = checkpoint_path(out)
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    state = {"format_version": 1, "step": 3, "policy": {"w": torch.zeros(2)}}
    torch.save({**state, "config": to_dict(cfg)}, ckpt)
    return argv


def _history(out) -> list[dict]:
    return [json.loads(x) for x in (out / HISTORY_NAME).read_text().splitlines()]


@pytest.mark.parametrize(
    "change, keys",
    [
        (["clipo.method.temperature=0.2"], ["clipo.method.temperature"]),
        (["clipo.objective=dapo"], ["clipo.objective"]),
        (["clipo.enabled=false"], ["clipo.enabled"]),
        (["seed=1"], ["seed"]),
        (["train.lr=0.1", "train.weight_decay=0.1"], ["train.lr", "train.weight_decay"]),
    ],
)  # a model change: test_train_inputs.py::test_a_model_change_is_refused_even_with_the_flag
def test_a_changed_config_is_refused_before_the_model_loads(
    tmp_path, capsys, no_model, change, keys
):
    out = tmp_path / "run"
    argv = _trained(out, "model.source=tiny")
    config_before = (out / "config.json").read_bytes()
    history_before = (out / HISTORY_NAME).read_bytes()
    line = refused(capsys, lambda: train.main([*argv, *change]))  # no ModelBuilt: not reached
    assert f"output.dir={out} holds a checkpoint (step 3) trained with another config: " in line
    named = line.split("another config: ")[1].split("; rerun")[0]
    assert [x.split(" (")[0] for x in named.split(", ")] == keys
    assert line.endswith("or pass --allow-config-change to resume with the new ones")
    assert (out / "config.json").read_bytes() == config_before  # nothing written
    assert (out / HISTORY_NAME).read_bytes() == history_before


def test_tau_change_names_old_and_new_values(tmp_path, capsys, no_model):
    out = tmp_path / "run"
    argv = _trained(out)
    line = refused(capsys, lambda: train.main([*argv, "clipo.method.temperature=0.2"]))
    tau = load_config(None, []).clipo.method.temperature
    assert f"clipo.method.temperature ({tau!r} -> 0.2)" in line


def test_the_flag_accepts_the_change_and_the_history_keeps_both(tmp_path, no_model):
    out = tmp_path / "run"
    argv = _trained(out)
    with pytest.raises(ModelBuilt):  # past the checks: the model would load now
        train.main(["--allow-config-change", *argv, "clipo.method.temperature=0.2"])
    assert json.loads((out / "config.json").read_text())["clipo"]["method"]["temperature"] == 0.2
    hist = _history(out)
    assert [h["step"] for h in hist] == [0, 3]  # a fresh start, then the resume at step 3
    assert hist[0]["changed"] == [] and hist[1]["changed"] == ["clipo.method.temperature"]
    assert hist[1]["config"]["clipo"]["method"]["temperature"] == 0.2


@pytest.mark.parametrize(
    "change",
    [["train.steps=50"], ["output.checkpoint_every=7", "threads=1"], ["rollout.backend=hf"]],
)
def test_budget_and_execution_keys_may_change(tmp_path, no_model, change):
    out = tmp_path / "run"
    argv = _trained(out)
    with pytest.raises(ModelBuilt):
        train.main([*argv, *change])
    assert _history(out)[-1]["changed"] == []  # nothing refused to allow


def test_config_changes_compares_the_keys_both_sides_have():
    saved = {"seed": 0, "train": {"lr": 1e-5, "steps": 4}, "gone": 1}
    now = {"seed": 0, "train": {"lr": 1e-5, "steps": 9}, "new": {"x": 2}}
    assert config_changes(saved, now) == []  # steps may change; gone / new: another schema
    assert config_changes(saved, {**now, "seed": 1, "train": {"lr": 0.1}}) == ["seed", "train.lr"]


def test_a_fresh_directory_takes_any_config(tmp_path, no_model):
    out = tmp_path / "run"
    _trained(out)
    checkpoint_path(out).unlink()  # killed before its first checkpoint: nothing to resume
    with pytest.raises(ModelBuilt):
        train.main([*QUIET, f"output.dir={out}", "seed=5"])
    assert json.loads((out / "config.json").read_text())["seed"] == 5


@pytest.mark.slow
@pytest.mark.mcore
def test_an_allowed_lr_change_reaches_the_optimiser(tmp_path, mcore_single_process):
    """The optimiser state kept its saved lr while config.json showed the new one; with the
    flag the config's lr is the one that trains (read back from the next checkpoint)."""
    pytest.importorskip("transformers")
    from clipo_megatron.models.smollm2 import smollm2_gguf_path

    try:
        smollm2_gguf_path()  # the tokenizer
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from .test_train_e2e import TINY

    out = tmp_path / "lr"
    base = [*TINY, "eval.size=0", "rollout.backend=hf", "output.plots=false", f"output.dir={out}"]
    assert train.main([*base, "train.steps=1", "train.lr=1e-5"]) == 0
    assert train.main(["--allow-config-change", *base, "train.steps=2", "train.lr=0.01"]) == 0
    state = torch.load(checkpoint_path(out), weights_only=True)
    assert [g["lr"] for g in state["optimizer"]["param_groups"]] == [0.01]
    assert state["config"]["train"]["lr"] == 0.01
