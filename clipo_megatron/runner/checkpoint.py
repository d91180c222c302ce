# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Checkpoint files of a run: one `latest.pt`, written atomically by rank 0, read safely.

Reading goes through `core.safe_load` (weights only: a crafted file is refused, never run).
Writing refuses a state with a non-finite weight (a NaN policy saved once is resumed by
every rerun), and a failed write (a full disk) removes its temporary file and leaves the
previous `latest.pt` as it was.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import torch

from clipo_megatron.core import safe_load
from clipo_megatron.core.safe_load import RUN_CHECKPOINT_FORMAT, load_state
from clipo_megatron.file_format import check_version, stamped
from clipo_megatron.runner.parallel import barrier, is_rank0


class CheckpointNotWritten(RuntimeError):
    """A checkpoint was not written (non-finite weights, a full disk); the previous one is kept."""

    def __init__(self, message: str, *, full_disk: bool = False):
        super().__init__(message)
        self.full_disk = full_disk


def checkpoint_path(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints" / "latest.pt"


def save_checkpoint(run, path: Path) -> None:
    """Collective under TP / PP (the state is gathered to every rank, so every rank refuses a
    non-finite one alike); rank 0 writes."""
    state = stamped(run.state_dict(), RUN_CHECKPOINT_FORMAT)
    bad = first_nonfinite(state)
    if bad is not None:
        raise CheckpointNotWritten(
            f"checkpoint {path} not written: {bad} is not finite at step {state['step']} "
            "(the previous checkpoint is kept)"
        )
    if is_rank0():
        write_atomic(state, path)
    barrier()


def first_nonfinite(state: dict) -> str | None:
    """The dotted name of the first floating tensor of the policy, its optimizer or the head
    holding a NaN / inf, or None. Metrics (`history`) may hold NaN: they are not weights."""
    stack = [(part, state.get(part)) for part in ("policy", "optimizer", "head")]
    while stack:
        name, value = stack.pop(0)
        if isinstance(value, dict):
            stack[:0] = [(f"{name}.{k}", v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            stack[:0] = [(f"{name}.{i}", v) for i, v in enumerate(value)]
        elif torch.is_tensor(value) and value.is_floating_point():
            if not bool(torch.isfinite(value).all()):
                return name
    return None


def write_atomic(state: dict, path: Path) -> None:
    """`state` to `path` through `<path>.tmp` and a rename: a kill or a full disk mid-write
    never leaves a broken `latest.pt`, and the temporary file is removed on any failure.

    torch writes through a Python file object here: given a path, its C++ writer reports a
    full disk as "unexpected pos" and never says ENOSPC; a file object's write raises OSError.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # a full disk may show only here (delayed allocation, NFS)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        why = "no space left on device" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        raise CheckpointNotWritten(
            f"checkpoint {path} not written: {why} ({'ENOSPC, ' if e.errno == errno.ENOSPC else ''}"
            f"{tmp.name} removed, the previous checkpoint kept)",
            full_disk=e.errno == errno.ENOSPC,
        ) from None
    except BaseException:  # a second Ctrl-C, a serialisation error: no half file left behind
        tmp.unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path) -> dict:
    """The run state in `path`, weights only (`core.safe_load`), of this layout's version."""
    state = load_state(path)
    check_version(state, RUN_CHECKPOINT_FORMAT, path, "delete it to start over")
    return state


def check_readable(path: Path) -> dict:
    """The run state (tensors memory-mapped), or ValueError (one line naming `path` and the
    fix) if `path` would not load (`core.safe_load.check_readable`), before any model loads."""
    return safe_load.check_readable(path, "delete it to start over", "point output.dir elsewhere")
