# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The one loader of every checkpoint file the project reads: `torch.load(weights_only=True)`.

A pickle names the callables that rebuild it; `weights_only=False` calls whatever a file
names, so a crafted `latest.pt` (or a NeMo-RL head checkpoint on shared storage) runs code
when it is loaded. With `weights_only=True` torch's unpickler rebuilds only tensors, dtypes,
devices, `torch.Size`, `OrderedDict` and plain containers / scalars, which is all a
checkpoint of this project holds (the runner's `latest.pt`, the NeMo-RL head and CPU-worker
files: state dicts, AdamW state, RNG bytes, metrics, the config as a dict). `ALLOWED` names
the types beyond torch's own set that a checkpoint may hold (none today; add one here, never
at a call site). Anything else is refused in one line naming the file and the type.

Imports torch only, so the runner, the eval package and the NeMo-RL workers share it.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from clipo_megatron.file_format import check_version

# The runner's latest.pt: {format_version, step, policy, optimizer, head, history, ...}; written
# by runner/checkpoint.py, read there and by `eval` (a trained model).
RUN_CHECKPOINT_FORMAT = 1

# Types a checkpoint may hold beyond torch's weights-only defaults: the allow-list's one home.
ALLOWED: list[Any] = []


class UnsafeCheckpoint(ValueError):
    """A checkpoint file names a callable outside the allow-list: refused, never called."""


def load_state(path: str | Path, *, mmap: bool = False) -> Any:
    """The object saved in `path`, on the host, with nothing but the allow-listed types.

    Raises `UnsafeCheckpoint` (a ValueError, one line naming the file) when the file names any
    other type or function; other errors (a truncated file, ...) propagate as torch raises them.
    """
    try:
        with torch.serialization.safe_globals(ALLOWED):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL (\S+)", str(e))
        what = f"`{found.group(1)}`" if found else "an object"
        raise UnsafeCheckpoint(
            f"checkpoint {path} refused: it pickles {what}, which no checkpoint holds (only "
            "tensors, numbers, strings and containers load; loading it could run code); "
            "delete the file if you did not write it"
        ) from None


def load_verified(path: str | Path) -> Any:
    """The zip container's CRCs checked (ValueError naming a bad member), then the payload read
    weights-only and memory-mapped (`load_state`: UnsafeCheckpoint for a pickle naming code)."""
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
        if bad is not None:
            raise ValueError(f"member {bad} fails its CRC check")
    return load_state(path, mmap=True)


def check_readable(path: str | Path, fix: str, elsewhere: str) -> dict:
    """The run state in `path` (tensors memory-mapped, not copied), or ValueError: one line
    naming `path`, the reason and what the caller's user should do (`fix` for a broken file,
    `elsewhere` for another file).

    Cheap, so it runs before any model loads: the zip container's CRCs are checked (a
    truncated or overwritten file), then the pickle is read weights-only (a file that is not a
    checkpoint of this project, or one that names code to run: refused, never run). A
    zero-byte file is named, where torch would raise a bare `EOFError`."""
    try:
        state = load_verified(path)
        if not isinstance(state, dict) or "step" not in state:
            raise ValueError("no run state in it (a dict with 'step')")
    except UnsafeCheckpoint as e:
        raise ValueError(f"{e}, or {elsewhere}") from None
    except Exception as e:  # any reason the load would fail: one line, not its traceback
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(
            f"checkpoint {path} is unreadable ({reason}): {fix}, or {elsewhere}"
        ) from None
    check_version(state, RUN_CHECKPOINT_FORMAT, f"checkpoint {path}", f"{fix}, or {elsewhere}")
    return state
