# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which of NeMo-RL's three GRPO loops a recipe asks for: the one home of that rule.

NeMo-RL's `examples/run_grpo.py` (in every supported version) picks the loop after `setup`:

1. `grpo.async_grpo.enabled` -> `async_grpo_train` (checked first: an async recipe that also
   sets `data_plane.enabled` runs the async loop over the TransferQueue policy);
2. else `data_plane.enabled` -> `grpo_train_sync` (`nemo_rl/algorithms/grpo_sync.py`, the
   TransferQueue data plane; `_select_trainer`);
3. else `grpo_train`.

A fourth entry point, `examples/run_grpo_single_controller.py`, runs NeMo-RL's
`SingleControllerActor` (async over the data plane); its recipes carry an `async_rl:` block
(and null `grpo.async_grpo`), which this rule checks before the other two.

CLIPO's driver runs `grpo_train`, `async_grpo_train` and `grpo_train_sync`
(`driver.grpo_train_with_clipo` picks by this rule); the estimator, the capture in the
prev-logprob pass, the head step and its checkpoints are the same in all three (docs/nemo_rl.md,
"Which loop runs"). Running a recipe of another loop through it would train it with a loop it
did not ask for, so the preflight refuses such a recipe (`unsupported_loop_problem`) before
anything starts, and a recipe NeMo-RL's own loop would stop on (`async_problems`,
`sync_problems`) likewise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clipo_megatron.nemo_rl.port.master_config import as_conf, dotted_get


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

# The loops CLIPO's driver runs (the single-controller actor is not one: docs/nemo_rl.md).
SUPPORTED = (GRPO_TRAIN, ASYNC_GRPO_TRAIN, GRPO_TRAIN_SYNC)


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


def loop_problems(cfg: dict[str, Any]) -> list[str]:
    """The preflight's lines: the loop is one CLIPO's driver runs, and an async (TransferQueue)
    recipe is one NeMo-RL's async (TransferQueue) loop runs."""
    if loop_of(cfg) is ASYNC_GRPO_TRAIN:
        return async_problems(cfg)
    if loop_of(cfg) is GRPO_TRAIN_SYNC:
        return sync_problems(cfg)
    problem = unsupported_loop_problem(cfg)
    return [problem] if problem else []


def unsupported_loop_problem(cfg: dict[str, Any]) -> str | None:
    """One line when the recipe asks for a loop CLIPO's driver does not run (or an async recipe
    it cannot run), else None."""
    loop = loop_of(cfg)
    if loop in (ASYNC_GRPO_TRAIN, GRPO_TRAIN_SYNC):
        problems = async_problems(cfg) if loop is ASYNC_GRPO_TRAIN else sync_problems(cfg)
        return problems[0] if problems else None
    if loop in SUPPORTED:
        return None
    return (  # loop is SINGLE_CONTROLLER
        f"async_rl is set: this is a recipe of NeMo-RL's {loop.name}, and CLIPO's driver runs "
        "grpo_train, async_grpo_train and grpo_train_sync only (it would train the recipe with a "
        "loop it did not ask for); run it without CLIPO with that script, or start from a "
        "grpo_train recipe"
    )


def sync_problems(cfg: dict[str, Any]) -> list[str]:
    """One line per setting grpo_train_sync stops on (NeMo-RL's rule) or CLIPO cannot read in it;
    [] if none."""
    conf = as_conf(cfg)
    out = [
        f"grpo.{key} is set with data_plane.enabled=true: grpo_train_sync raises "
        "NotImplementedError on message-level advantage penalties; unset it or set "
        "data_plane.enabled=false"
        for key in ("invalid_tool_call_advantage", "malformed_thinking_advantage")
        if dotted_get(conf, f"grpo.{key}") is not None
    ]
    clipo_on = dotted_get(conf, "clipo.enabled") is not False
    if clipo_on and _on(dotted_get(conf, "grpo.reward_shaping.enabled")):
        out.append(
            "grpo.reward_shaping.enabled=true with data_plane.enabled=true: grpo_train_sync hands "
            "the advantage estimator the shaped reward only (not unshaped_total_reward), so "
            "CLIPO's positives would be read from the shaped reward; set "
            "grpo.reward_shaping.enabled=false or data_plane.enabled=false"
        )
    return out


# What NeMo-RL's run_grpo.py raises NotImplementedError on before async_grpo_train, and what
# async_grpo_train asserts, as (key, value that stops it, why).
_ASYNC_STOPS = (
    ("grpo.use_dynamic_sampling", True, "dynamic sampling (DAPO) is not supported with async GRPO"),
    ("grpo.reward_scaling.enabled", True, "reward_scaling is not supported with async GRPO"),
    ("grpo.reward_shaping.enabled", True, "reward_shaping is not supported with async GRPO"),
    (
        "data.use_multiple_dataloader",
        True,
        "multiple dataloaders are not supported with async GRPO",
    ),
    (
        "loss_fn.use_importance_sampling_correction",
        False,
        "async_grpo_train asserts the importance-sampling correction (off-policy samples); set "
        "it to true",
    ),
)


def async_problems(cfg: dict[str, Any]) -> list[str]:
    """One line per setting NeMo-RL's async path stops on, named before Ray starts; [] if none."""
    conf = as_conf(cfg)
    out = []
    if _on(dotted_get(conf, "data_plane.enabled")):
        out.append(
            "grpo.async_grpo.enabled=true with data_plane.enabled=true: NeMo-RL runs "
            "async_grpo_train over a TQPolicy, a pairing CLIPO has not been run in (its async "
            'and TransferQueue loops each have, docs/nemo_rl.md "Which loop runs"); set '
            "data_plane.enabled=false"
        )
    for key, stop, why in _ASYNC_STOPS:
        value = dotted_get(conf, key)
        if _on(value) == stop:  # unset is NeMo-RL's default, off
            out.append(f"{key}={str(value).lower()} with grpo.async_grpo.enabled=true: {why}")
    return out
