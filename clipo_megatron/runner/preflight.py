# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Checks of a run's inputs before any model loads: a mistake costs a second, not a model load.

`check_inputs` reads only the YAML and the overrides (no schema, no torch import), so a
wrong data path fails before the seconds torch takes to import.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

PATH_KEYS = ("data.path", "eval.path", "output.dir")
CAP_KEYS = ("data.max_row_chars", "data.max_file_mb")  # the data files' size caps


def _writable_dir(path: Path) -> None:
    """`path` exists as a writable directory or can be created (nothing is created here)."""
    probe = path.absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"output.dir={path}: {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"output.dir={path}: {probe} is not writable; choose another output.dir")


def input_paths(config_path: str | None, overrides: list[str]) -> dict[str, str]:
    """data.path / eval.path / output.dir and the data size caps as the YAML and the overrides
    set them ("" if unset)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if config_path and not Path(config_path).is_file():
        raise FileNotFoundError(f"--config {config_path}: no such file")
    try:
        raw = OmegaConf.merge(
            OmegaConf.load(config_path) if config_path else OmegaConf.create(),
            OmegaConf.from_dotlist([o for o in overrides if "=" in o]),
        )
        return {k: str(OmegaConf.select(raw, k, default="") or "") for k in PATH_KEYS + CAP_KEYS}
    except OmegaConfBaseException as e:
        raise ValueError(f"config: {str(e).splitlines()[0]}") from None


def check_inputs(paths: dict[str, str], *, output_kind: str = "train") -> None:
    """The data files exist and their first row parses; the output directory can be written
    and is new, empty or already ours (`output_folder.py`; `output_kind`: "compare" for
    `compare --out`)."""
    from clipo_megatron.output_folder import check_output_folder
    from clipo_megatron.runner.problems import load_problems

    caps = {k.split(".")[1]: int(v) for k in CAP_KEYS if (v := paths.get(k, "")).isdigit()}
    for key in ("data.path", "eval.path"):
        if paths.get(key):
            try:  # the data layer's own loader reads the file, within the size caps
                load_problems(SimpleNamespace(one_shot=True, **caps), 1, path=paths[key])
            except (OSError, ValueError) as e:
                raise ValueError(f"{key}={paths[key]}: {e}") from None
    if paths.get("output.dir"):
        check_output_folder(paths["output.dir"], kinds=(output_kind,), key="output.dir")
        _writable_dir(Path(paths["output.dir"]))


def check_data(cfg) -> None:
    """The training data fills one step: `rollout.prompts_per_step` distinct prompts, every
    row with a question and an answer. Read before the model loads (the run reads it again
    then), so a short file fails in a second, not after the model load and the first
    evaluation."""
    from clipo_megatron.runner.problems import load_problems, step_problems

    where = f"data.path={cfg.data.path}: " if cfg.data.path else ""
    try:
        problems = load_problems(cfg.data, cfg.data.train_size, path=cfg.data.path)
        step_problems(problems, 0, cfg.rollout.prompts_per_step)
    except (OSError, ValueError) as e:
        message = str(e)
        if cfg.data.path and message.startswith("rollout.prompts_per_step"):
            message = message.replace("or raise data.train_size", "or add rows to the file")
        raise ValueError(where + message) from None


def check_launch(cfg) -> None:
    """The process count matches parallel.tp * parallel.pp (torchrun's WORLD_SIZE)."""
    from clipo_megatron.runner.config import launch_problem

    problem = launch_problem(
        cfg.parallel.tp, cfg.parallel.pp, int(os.environ.get("WORLD_SIZE", "1"))
    )
    if problem:
        raise ValueError(problem)


def check_checkpoint(output_dir: str | Path) -> None:
    """The run's checkpoint, if there is one, loads: a broken one fails here, not after the
    model and the engine have loaded (a resume reads it only then)."""
    from clipo_megatron.runner.checkpoint import check_readable, checkpoint_path

    path = checkpoint_path(output_dir)
    if path.exists():
        check_readable(path)
