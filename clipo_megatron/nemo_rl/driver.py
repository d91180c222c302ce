# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The CLIPO GRPO driver: NeMo-RL's `setup` + `grpo_train` (or `async_grpo_train`, or the
TransferQueue loop `grpo_train_sync`, picked as NeMo-RL's run_grpo.py picks it: `loops.py`) with
three seams filled.

`grpo_train_with_clipo` is the call both this driver and the CPU contract suite
(tests/nemo_rl/) make. Seams:

1. `setup(..., policy_factory=ClipoPolicy)`   -> worker extension, head, warm-up, head checkpoints;
2. the advantage estimator                    -> `ClipoAdvantageEstimator` around NeMo-RL's GRPO one,
                                                 its r_CL from `head_step.WorkersHeadStep`;
3. the loss                                   -> `losses.build_policy_loss` for the objective.

How 1 and 2 reach inside NeMo-RL (the estimator is built inside `grpo_train`) is the port's
business (`port/`); nothing of NeMo-RL is edited.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from clipo_megatron.nemo_rl import deadline
from clipo_megatron.nemo_rl.advantage_estimator import ClipoAdvantageEstimator, ClipoRunState
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig, validate_master_config
from clipo_megatron.nemo_rl.head_step import WorkersHeadStep
from clipo_megatron.nemo_rl.port import run_grpo
from clipo_megatron.nemo_rl.port.grpo_loop import GrpoTrainArgs
from clipo_megatron.nemo_rl.port.loops import (
    ASYNC_GRPO_TRAIN,
    GRPO_TRAIN_SYNC,
    loop_of,
    unsupported_loop_problem,
)
from clipo_megatron.nemo_rl.port.master_config import master_config_dict
from clipo_megatron.nemo_rl.port.train_loop import run_loop


def grpo_train_with_clipo(
    grpo_module: Any,
    clipo: ClipoNemoRLConfig,
    state: ClipoRunState,
    policy: Any,
    args: GrpoTrainArgs,
) -> int | None:
    """NeMo-RL's `grpo_train(policy, *args)`, or `async_grpo_train` / `grpo_train_sync` when the
    master config asks for it (`grpo.async_grpo.enabled` / `data_plane.enabled`, as run_grpo.py
    picks; the TransferQueue loop's policy is `make_clipo_policy_class(data_plane=)`'s), with
    every advantage estimator it builds wrapped by `ClipoAdvantageEstimator`. Another loop's config is a ValueError (the
    preflight's line): never the synchronous loop in its place. The run's logger also receives the
    CLIPO metrics under `train/clipo/*` and, in both arms, the verifier's answers per status
    under `train/verify/*`. With `CLIPO_SAVE_BY` set (the job's deadline, `deadline.py`),
    NeMo-RL's own `checkpoint_must_save_by` saves and stops before it: the step saved there
    when the run stopped short of its end (a requeue resumes there), else None."""

    def sink(metrics: dict, step: int) -> None:
        args.logger.log_metrics(metrics, step, prefix="train")

    head_step = WorkersHeadStep(policy.run_all_workers_single_data)  # r_CL from the workers

    def wrap(base: Any) -> ClipoAdvantageEstimator:
        return ClipoAdvantageEstimator(base, head_step, clipo, state, metrics_sink=sink)

    config = master_config_dict(args.master_config)
    wrong_loop = unsupported_loop_problem(config)
    if wrong_loop:
        raise ValueError(wrong_loop)
    save_by = deadline.save_by_from_env(os.environ)  # the job's time limit less the save's margin
    start, started = 0, time.time()
    if save_by is not None:
        start = deadline.saved_step(args.checkpointer)
        must = deadline.apply_save_by(args.master_config, save_by, started)
        print(
            f"[clipo] {deadline.SAVE_BY_ENV}: grpo_train saves and stops within {must} (DD:HH:MM:SS)"
        )
    loop, age = loop_of(config), None
    if loop is GRPO_TRAIN_SYNC:
        print("[clipo] grpo_train_sync (the TransferQueue data plane)")
    elif loop is ASYNC_GRPO_TRAIN:
        age = int(config["grpo"]["async_grpo"]["max_trajectory_age_steps"])
        print(f"[clipo] async_grpo_train, trajectories up to {age} step(s) old")
    run_loop(loop, grpo_module, policy, args, wrap, max_trajectory_age_steps=age)
    if save_by is None:
        return None
    end = deadline.saved_step(args.checkpointer)
    planned = deadline.planned_steps(args.master_config, len(args.dataloader))
    now = time.time()
    at_deadline = deadline.stopped_at_deadline(
        save_by, started=started, now=now, steps=(start, end), planned=planned
    )
    return end if at_deadline else None


def data_plane_of(config: dict[str, Any]) -> dict[str, Any] | None:
    """The recipe's `data_plane` block when NeMo-RL would run it with grpo_train_sync (the
    policy is then a TQPolicy), else None."""
    return dict(config["data_plane"]) if loop_of(config) is GRPO_TRAIN_SYNC else None


def prepare(config: dict[str, Any]):
    """(NeMo-RL MasterConfig, tokenizer, setup_response_data's 4-tuple) from a resolved recipe.

    NeMo-RL's pydantic `MasterConfig` validates everything but the `clipo:` block; the
    processors and the environment are registered first. Shared with the contract suite.
    """
    from clipo_megatron.nemo_rl.config import with_env_grader
    from clipo_megatron.nemo_rl.data import register_with_nemo_rl

    config = with_env_grader(config)  # the environment grades with clipo.grader
    master = run_grpo.master_config(config)
    register_with_nemo_rl()
    tokenizer, data = run_grpo.tokenizer_and_data(master)
    if ClipoNemoRLConfig.from_dict(config.get("clipo")).drop_overlong_prompts:
        drop_overlong_prompts(data[0], data[1], int(master.data["max_input_seq_length"]))
    return master, tokenizer, data


def drop_overlong_prompts(dataset: Any, val_dataset: Any, limit: int) -> None:
    """verl's filter_overlong_prompts on NeMo-RL's datasets (one per task with
    `use_multiple_dataloader`): the training and the validation rows, as verl builds both."""
    from clipo_megatron.nemo_rl.prompt_filter import drop_from_dataset

    train = dataset.values() if isinstance(dataset, dict) else [dataset]
    for name, sets in (("training", train), ("validation", [val_dataset])):
        for ds in sets:
            if ds is not None:
                print(
                    f"  clipo.drop_overlong_prompts: {name}: {drop_from_dataset(ds, limit).line()}"
                )


def run(config: dict[str, Any]) -> None:  # pragma: no cover - needs a GPU cluster
    """Run CLIPO GRPO from a resolved master-config dict that passed the preflight
    (`guard.preflight`: the supported NeMo-RL, its seams, the recipe), as
    examples/run_grpo_clipo.py does."""
    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    wrong_loop = unsupported_loop_problem(config)
    if wrong_loop:  # the preflight said so already; never run a recipe by another loop
        raise ValueError(wrong_loop)
    clipo = validate_master_config(config)
    from clipo_megatron.nemo_rl.loss_functions import build_policy_loss
    from clipo_megatron.nemo_rl.policy import make_clipo_policy_class

    run_grpo.start_ray()  # before prepare(): the environments are Ray actors
    master, tokenizer, data = prepare(config)
    run_grpo.new_experiment_dir(master)

    state = ClipoRunState()
    policy_cls = make_clipo_policy_class(clipo, state, data_plane=data_plane_of(config))
    policy, args = run_grpo.setup(master, tokenizer, data, policy_cls)
    # The objective's policy loss, built from the config setup returns (as the contract suite).
    loss_fn = build_policy_loss(clipo.objective, dict(args.master_config.loss_fn))
    args = replace(args, loss_fn=loss_fn)
    saved = grpo_train_with_clipo(run_grpo.grpo_module(), clipo, state, policy, args)
    if saved is not None:  # slurm/common.sh requeues on this status; the rerun resumes there
        print(
            f"[clipo] stopped at the deadline ({deadline.SAVE_BY_ENV}) with a checkpoint at step "
            f"{saved}; exiting {deadline.EXIT_REQUEUE} (requeue or rerun to resume)"
        )
        raise SystemExit(deadline.EXIT_REQUEUE)
