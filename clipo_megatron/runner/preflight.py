# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Checks of a run's inputs before any model loads: a mistake costs a second, not a model load."""

from __future__ import annotations

import os
from pathlib import Path

from clipo_megatron.runner.config import RunConfig


def _writable_dir(path: Path) -> None:
    """`path` exists as a writable directory or can be created (nothing is created here)."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"output.dir={path}: {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"output.dir={path}: {probe} is not writable; choose another output.dir")


def preflight(cfg: RunConfig) -> None:
    """ValueError / FileNotFoundError naming the key for an unusable data file, eval file,
    output directory or launch size."""
    from clipo_megatron.runner.problems import load_problems

    for key, path in (("data.path", cfg.data.path), ("eval.path", cfg.eval.path)):
        if path:
            try:
                load_problems(cfg.data, 1, path=path)  # the first row exists and parses
            except (OSError, ValueError) as e:
                raise ValueError(f"{key}={path}: {e}") from None
    _writable_dir(Path(cfg.output.dir))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if cfg.parallel.tp * cfg.parallel.pp != world:
        raise ValueError(
            f"parallel.tp * parallel.pp = {cfg.parallel.tp * cfg.parallel.pp} but {world} "
            f"processes were launched (torchrun --nproc-per-node {cfg.parallel.tp * cfg.parallel.pp})"
        )
