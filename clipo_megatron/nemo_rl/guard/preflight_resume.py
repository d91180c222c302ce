# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Preflight: the CLIPO files a resume reads, checked before Ray starts and the policy loads.

NeMo-RL resumes from the highest `step_N` under `checkpointing.checkpoint_dir`
(`resume_layout.resume_step_dir`); `ClipoPolicy.__init__` then loads, after NeMo-RL has built the
policy on every GPU, the head's file (`<step>/<clipo.head_checkpoint_dir>/head.pt`: the head, its
AdamW, the run state `extra.step`), or with CLIPO off the baseline's `clipo_run_state.json`. Each
way that load fails is one line here, naming the path and the fix:

* CLIPO on: no head file (the checkpoint was saved with CLIPO off, or `head_checkpoint_dir`
  changed); a file that does not read (truncated, not a checkpoint, code in the pickle, another
  `format_version`); a head of
  another shape than the recipe builds (`head_type`, `embed_dim`, the model's hidden size); no
  AdamW state; no run state (the step counter, so warm-up and the positive draw would restart);
* CLIPO off: a run state that does not parse; a head that would be ignored (a warning).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clipo_megatron.file_format import check_version
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.resume_layout import resume_step_dir
from clipo_megatron.nemo_rl.worker_state import HEAD_FILE, HEAD_FORMAT, HEAD_FORMAT_FIX

FRESH = "or point checkpointing.checkpoint_dir at a new folder to start afresh"


def check_resume_clipo(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the CLIPO files the resume would load; none without a resume."""
    step_dir = resume_step_dir(config)
    if step_dir is None:
        return [], []
    try:
        clipo = ClipoNemoRLConfig.from_dict(config.get("clipo") or {})
    except ValueError:  # the `clipo:` check names it
        return [], []
    head_dir = step_dir / clipo.head_checkpoint_dir
    if not clipo.head_runs:
        return _baseline(step_dir, head_dir)
    path = head_dir / HEAD_FILE
    if not path.is_file():
        return [
            f"resume from {step_dir}: no CLIPO head at {path} (saved with CLIPO off, or "
            f"clipo.head_checkpoint_dir changed); set clipo.enabled=false to resume it as the "
            f"baseline, set clipo.head_checkpoint_dir to the folder it was saved in, {FRESH}"
        ], []
    try:
        saved = _read(path)
    except ValueError as e:
        return [
            f"resume from {step_dir}: {e}; delete {step_dir} to resume from the step before, {FRESH}"
        ], []
    return [
        p
        for p in (_trainer_problem(saved, path, clipo, config), _run_state_problem(saved, path))
        if p
    ], []


def _read(path: Path) -> dict:
    """The head file's payload, or ValueError: one line with the reason."""
    from clipo_megatron.core.safe_load import UnsafeCheckpoint, load_verified

    try:
        saved = load_verified(path)
    except UnsafeCheckpoint as e:
        raise ValueError(str(e)) from None
    except Exception as e:  # any reason the worker's load would fail
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(f"the CLIPO head {path} is unreadable ({reason})") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("trainer"), dict):
        raise ValueError(f"{path} holds no CLIPO head trainer state (not a head file)")
    check_version(saved, HEAD_FORMAT, path, HEAD_FORMAT_FIX)
    return saved


def _trainer_problem(saved: dict, path: Path, clipo: ClipoNemoRLConfig, config: dict) -> str | None:
    """The saved head against the head the recipe builds: its type, embed_dim, input size."""
    trainer = saved["trainer"]
    head = trainer.get("head") or {}
    proj = head.get("proj.weight")
    if proj is None or "optimizer" not in trainer or "steps_done" not in trainer:
        return f"{path} lacks the head's weights or its AdamW state; {FRESH}"
    saved_type = "mlp" if any(k.startswith("hidden.") for k in head) else "linear"
    saved_shape = {
        "clipo.method.head_type": saved_type,
        "clipo.method.embed_dim": int(proj.shape[0]),
    }
    want = {
        "clipo.method.head_type": clipo.method.head_type,
        "clipo.method.embed_dim": clipo.method.embed_dim,
    }
    hidden = _hidden_size(config)
    if hidden is not None:
        saved_shape["the model's hidden size"], want["the model's hidden size"] = (
            int(proj.shape[1]),
            hidden,
        )
    diff = [
        f"{k}: saved {saved_shape[k]}, recipe {want[k]}" for k in want if saved_shape[k] != want[k]
    ]
    if not diff:
        return None
    return (
        f"{path} holds a head of another shape ({'; '.join(diff)}); set the recipe's values to "
        f"the saved ones, {FRESH}"
    )


def _hidden_size(config: dict) -> int | None:
    from clipo_megatron.nemo_rl.guard.preflight_parallel import model_shape

    name = str((config.get("policy") or {}).get("model_name") or "")
    shape = model_shape(name) if name else None
    return shape.hidden if shape is not None else None


def _run_state_problem(saved: dict, path: Path) -> str | None:
    step = (saved.get("extra") or {}).get("step")
    if type(step) is int and step >= 0:
        return None
    return (
        f"{path} holds no CLIPO run state (extra.step = {step!r}): the step counter, warm-up and "
        f"the positive draw would restart at 0; {FRESH}"
    )


def _baseline(step_dir: Path, head_dir: Path) -> tuple[list[str], list[str]]:
    """CLIPO off: the run state must parse; a saved head is ignored (said once)."""
    from clipo_megatron.nemo_rl.policy import load_run_state

    try:
        load_run_state(str(step_dir))
    except ValueError as e:
        return [f"resume from {step_dir}: {e}"], []
    if (head_dir / HEAD_FILE).is_file():
        return [], [
            f"{head_dir / HEAD_FILE}: the checkpoint holds a CLIPO head but clipo.enabled=false; "
            "the run resumes as the baseline without it (set clipo.enabled=true to resume CLIPO)"
        ]
    return [], []
