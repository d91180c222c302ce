# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The steps NeMo-RL's `examples/run_grpo.py` takes before its loop, as functions CLIPO's driver
calls in the same order: Ray, the master config, the tokenizer and generation config, the data,
the experiment directory, `setup` (whose return `grpo_loop.train_args_from_setup` reads)."""

from __future__ import annotations

from typing import Any

from clipo_megatron.nemo_rl.port.grpo_loop import GrpoTrainArgs, train_args_from_setup


def grpo_module() -> Any:
    """`nemo_rl.algorithms.grpo`: `setup`, `grpo_train`, `async_grpo_train`, `MasterConfig`."""
    from nemo_rl.algorithms import grpo

    return grpo


def start_ray() -> None:
    """Before the data: the environments are Ray actors."""
    from nemo_rl.distributed.virtual_cluster import init_ray

    init_ray()


def master_config(config: dict[str, Any]) -> Any:
    """NeMo-RL's pydantic `MasterConfig` of a resolved recipe (CLIPO's `clipo:` block left out:
    NeMo-RL does not know it)."""
    from nemo_rl.algorithms.grpo import MasterConfig  # imported by name: a seam (seam_imports)

    return MasterConfig(**{k: v for k, v in config.items() if k != "clipo"})


def tokenizer_and_data(master: Any) -> tuple[Any, tuple[Any, Any, Any, Any]]:
    """(tokenizer, (dataset, val_dataset, task_to_env, val_task_to_env)); sets the generation
    config's tokenizer-dependent keys on `master`, as run_grpo.py does."""
    from nemo_rl.algorithms.utils import get_tokenizer
    from nemo_rl.data.utils import setup_response_data
    from nemo_rl.models.generation import configure_generation_config

    tokenizer = get_tokenizer(master.policy["tokenizer"])
    master.policy["generation"] = configure_generation_config(
        master.policy["generation"], tokenizer
    )
    return tokenizer, setup_response_data(tokenizer, master.data, master.env)


def new_experiment_dir(master: Any) -> None:
    from nemo_rl.utils.logger import get_next_experiment_dir

    master.logger["log_dir"] = get_next_experiment_dir(master.logger["log_dir"])


def setup(
    master: Any, tokenizer: Any, data: tuple[Any, Any, Any, Any], policy_factory: type
) -> tuple[Any, GrpoTrainArgs]:
    """(policy, the loop's arguments): NeMo-RL's `setup` with the policy built from
    `policy_factory`."""
    dataset, val_dataset, task_to_env, val_task_to_env = data
    returned = grpo_module().setup(
        master, tokenizer, dataset, val_dataset, policy_factory=policy_factory
    )
    return train_args_from_setup(
        returned, tokenizer=tokenizer, task_to_env=task_to_env, val_task_to_env=val_task_to_env
    )


def config_problems(config: dict[str, Any]) -> list[str]:
    """One line per key NeMo-RL's `MasterConfig` refuses (the recipe as NeMo-RL validates it)."""
    from pydantic import ValidationError

    try:
        master_config(config)
    except ValidationError as e:
        return [pydantic_line(err) for err in e.errors()]
    return []


def pydantic_line(err: Any) -> str:  # a pydantic ErrorDetails (a TypedDict)
    key = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return (
            f"{key} is missing (NeMo-RL MasterConfig requires it); set it in the recipe or merge "
            "NeMo-RL's parent recipe (NEMO_RL_ROOT)"
        )
    return f"{key}={err.get('input')!r}: {err['msg']} (NeMo-RL MasterConfig); fix its value"
