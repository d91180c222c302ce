# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which of NeMo-RL's three GRPO loops a recipe asks for: the one home of that rule.

NeMo-RL's `examples/run_grpo.py` (7ea279a, v0.7.0) picks the loop after `setup`:

1. `grpo.async_grpo.enabled` -> `async_grpo_train` (checked first: an async recipe that also
   sets `data_plane.enabled` runs the async loop over the TransferQueue policy);
2. else `data_plane.enabled` -> `grpo_train_sync` (`nemo_rl/algorithms/grpo_sync.py`, the
   TransferQueue data plane; `_select_trainer`);
3. else `grpo_train`.

A fourth entry point, `examples/run_grpo_single_controller.py`, runs NeMo-RL's
`SingleControllerActor` (async over the data plane); its recipes carry an `async_rl:` block
(and null `grpo.async_grpo`), which this rule checks before the other two.

CLIPO's driver wraps `grpo_train` only (`driver.grpo_train_with_clipo`). Running a recipe of
another loop through it would train it with the synchronous loop it did not ask for, so the
preflight refuses such a recipe (`unsupported_loop_problem`) before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clipo_megatron.nemo_rl.recipe_keys import as_conf, dotted_get


@dataclass(frozen=True)
class Loop:
    name: str  # NeMo-RL's function
    key: str | None  # the recipe key that selects it (None: the default loop)


GRPO_TRAIN = Loop("grpo_train", None)
ASYNC_GRPO_TRAIN = Loop("async_grpo_train", "grpo.async_grpo.enabled")
GRPO_TRAIN_SYNC = Loop("grpo_train_sync", "data_plane.enabled")
SINGLE_CONTROLLER = Loop(
    "SingleControllerActor (examples/run_grpo_single_controller.py)", "async_rl"
)

# The loops CLIPO's driver runs (issue of the other two: docs/nemo_rl.md, "What is supported").
SUPPORTED = (GRPO_TRAIN,)


def loop_of(cfg: dict[str, Any]) -> Loop:
    """The loop NeMo-RL's run_grpo.py would run this resolved recipe with."""
    conf = as_conf(cfg)
    if dotted_get(conf, "async_rl") is not None:
        return SINGLE_CONTROLLER
    if _on(dotted_get(conf, "grpo.async_grpo.enabled")):
        return ASYNC_GRPO_TRAIN
    if _on(dotted_get(conf, "data_plane.enabled")):
        return GRPO_TRAIN_SYNC
    return GRPO_TRAIN


def _on(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def unsupported_loop_problem(cfg: dict[str, Any]) -> str | None:
    """One line when the recipe asks for a loop CLIPO's driver does not run, else None."""
    loop = loop_of(cfg)
    if loop in SUPPORTED:
        return None
    if loop is SINGLE_CONTROLLER:
        return (
            f"async_rl is set: this is a recipe of NeMo-RL's {loop.name}, and CLIPO's driver "
            "runs grpo_train only (it would train the recipe with a loop it did not ask for); "
            "run it without CLIPO with that script, or start from a grpo_train recipe"
        )
    return (
        f"{loop.key}=true: NeMo-RL runs this recipe with {loop.name}, and CLIPO's driver runs "
        f"grpo_train only (it would train the recipe with a loop it did not ask for); set "
        f"{loop.key}=false to run it synchronously with CLIPO, or run it without CLIPO with "
        "NeMo-RL's examples/run_grpo.py"
    )
