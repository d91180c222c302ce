# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Checkpoint files of a run: one `latest.pt`, written atomically by rank 0."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import torch

from clipo_megatron.runner.parallel import barrier, is_rank0


def checkpoint_path(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints" / "latest.pt"


def save_checkpoint(run, path: Path) -> None:
    """Collective under TP / PP (the state is gathered); rank 0 writes."""
    state = run.state_dict()
    if is_rank0():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)  # atomic: a kill mid-save never leaves a broken checkpoint
    barrier()


def load_checkpoint(path: Path) -> dict:
    return torch.load(path, weights_only=False)


def check_readable(path: Path) -> None:
    """Raise ValueError (one line naming `path` and the fix) if `path` would not load.

    Cheap, so it runs before any model loads: the zip container's CRCs are checked
    (a truncated or overwritten file), then the pickle is read with the tensors
    memory-mapped, not copied (a file that is not a checkpoint of this runner).
    """
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad is not None:
                raise ValueError(f"member {bad} fails its CRC check")
        state = torch.load(path, weights_only=False, mmap=True, map_location="cpu")
        if not isinstance(state, dict) or "step" not in state:
            raise ValueError("no run state in it (a dict with 'step')")
    except Exception as e:  # any reason the load would fail: one line, not its traceback
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(
            f"checkpoint {path} is unreadable ({reason}): delete it to start over, "
            "or point output.dir elsewhere"
        ) from None
