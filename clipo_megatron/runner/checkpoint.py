# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Checkpoint files of a run: one `latest.pt`, written atomically by rank 0."""

from __future__ import annotations

import os
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
