# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which command a recipe belongs to: the single-machine runner or the NeMo-RL driver.

The two families share `seed:`, `clipo:`, `data:` and `eval:`; each has blocks the other has
not. Given to the wrong command, a recipe got advice meant for the other (the runner's
`cpu_demo.yaml` given to `examples/run_grpo_clipo.py` was told to flip Megatron flags): now it
is told, in one line, which command runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

RUNNER_BLOCKS = ("model", "rollout", "train", "output", "parallel", "threads")
NEMO_RL_BLOCKS = ("defaults", "grpo", "policy", "loss_fn", "env", "cluster", "checkpointing")

RUNNER_COMMAND = "clipo-megatron train --config {path}"
NEMO_RL_COMMAND = "python examples/run_grpo_clipo.py --config {path}"


def recipe_kind(top: Mapping) -> str | None:
    """ "runner" or "nemo_rl" when the top-level keys show one family only, else None."""
    keys = {str(k) for k in top}
    runner, nemo_rl = keys & set(RUNNER_BLOCKS), keys & set(NEMO_RL_BLOCKS)
    if runner and not nemo_rl:
        return "runner"
    if nemo_rl and not runner:
        return "nemo_rl"
    return None


def wrong_command(path: str | Path, top: Mapping, expected: str, command: str) -> str | None:
    """One line saying which command `path` belongs to, when it is not `expected`'s; else None.

    command: the command the user ran, for the message."""
    kind = recipe_kind(top)
    if kind is None or kind == expected:
        return None
    if kind == "runner":
        blocks = ", ".join(f"{k}:" for k in RUNNER_BLOCKS if k in top)
        return (
            f"{path} is a recipe of the single-machine runner ({blocks}), not a NeMo-RL recipe: "
            f"run it with `{RUNNER_COMMAND.format(path=path)}`, not {command}"
        )
    blocks = ", ".join(f"{k}:" for k in NEMO_RL_BLOCKS if k in top)
    return (
        f"{path} is a NeMo-RL recipe ({blocks}), not a runner recipe: run it with "
        f"`{NEMO_RL_COMMAND.format(path=path)}`, not {command}"
    )
