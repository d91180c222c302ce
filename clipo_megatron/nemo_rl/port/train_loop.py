# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Run the loop a recipe picked with CLIPO's estimator installed in the namespace that loop
looks it up in: `grpo` for `grpo_train` and `async_grpo_train`, `grpo_sync` (which imports the
name) for `grpo_train_sync`. The one place the three loops are told apart at run time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clipo_megatron.nemo_rl.port import transfer_queue
from clipo_megatron.nemo_rl.port.grpo_loop import (
    GrpoTrainArgs,
    call_async_grpo_train,
    call_grpo_train,
)
from clipo_megatron.nemo_rl.port.loops import ASYNC_GRPO_TRAIN, GRPO_TRAIN_SYNC, Loop
from clipo_megatron.nemo_rl.port.rebinding import advantage_estimator_installed


def run_loop(
    loop: Loop,
    grpo_module: Any,
    policy: Any,
    args: GrpoTrainArgs,
    wrap: Callable[[Any], Any],
    *,
    max_trajectory_age_steps: int | None = None,
) -> None:
    """`loop` over `policy` with `args`, every advantage estimator it builds `wrap(NeMo-RL's)`;
    the binding is undone when the loop returns or raises."""
    if loop is GRPO_TRAIN_SYNC:
        sync = transfer_queue.grpo_sync_module()
        with advantage_estimator_installed(sync, wrap):
            transfer_queue.call_grpo_train_sync(sync, policy, args)
        return
    with advantage_estimator_installed(grpo_module, wrap):
        if loop is ASYNC_GRPO_TRAIN:
            if max_trajectory_age_steps is None:
                raise ValueError("async_grpo_train needs max_trajectory_age_steps")
            call_async_grpo_train(grpo_module, policy, args, max_trajectory_age_steps)
        else:
            call_grpo_train(grpo_module, policy, args)
