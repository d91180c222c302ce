# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""How CLIPO calls NeMo-RL's `grpo_train` and `async_grpo_train` and builds their policy, each
beside the seam that guards it (the TransferQueue loop's: `transfer_queue.py`):

3. `grpo_train`'s positional arguments (`GrpoTrainArgs`, in its order; `async_grpo_train` takes
   the same 12 first, then `max_trajectory_age_steps`), read from `setup`'s return tuple by
   position (`train_args_from_setup`), whose names `SETUP_RETURNS` lists;
4. the policy: NeMo-RL's `Policy` under the CLIPO mixin, for `setup(policy_factory=)`, and the
   worker class's Python environment in NeMo-RL's actor registry.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from clipo_megatron.nemo_rl.port.rebinding import (
    ESTIMATOR,
    ESTIMATOR_SEAM,
    GRPO,
    ITERATOR_SEAM,
)
from clipo_megatron.source_match import Seam, Source, rebindable
from clipo_megatron.source_match.source import ast_params, own_nodes, render

_HERE = "port/grpo_loop.py"
# The Ray actor NeMo-RL runs the Megatron policy in; CLIPO's worker reuses its Python environment.
STOCK_MEGATRON_WORKER_FQN = (
    "nemo_rl.models.policy.workers.megatron_policy_worker.MegatronPolicyWorker"
)

# -------------------------------------------------------- 3. grpo_train's positional arguments


@dataclass
class GrpoTrainArgs:
    """`grpo_train`'s arguments after the policy, in its order (names differ between the
    supported versions, positions do not)."""

    policy_generation: Any
    dataloader: Any
    val_dataloader: Any
    tokenizer: Any
    loss_fn: Any
    task_to_env: Any
    val_task_to_env: Any
    logger: Any  # the 9th argument
    checkpointer: Any
    grpo_save_state: Any
    master_config: Any  # the 12th argument


def train_arguments(args: GrpoTrainArgs) -> tuple:
    """The 11 arguments after the policy, in grpo_train's order (the other loops share them)."""
    return tuple(getattr(args, f.name) for f in fields(args))


def call_grpo_train(grpo_module: Any, policy: Any, args: GrpoTrainArgs) -> None:
    grpo_module.grpo_train(policy, *train_arguments(args))


ASYNC_TRAIN = "async_grpo_train"


def call_async_grpo_train(
    grpo_module: Any, policy: Any, args: GrpoTrainArgs, max_trajectory_age_steps: int
) -> None:
    """`async_grpo_train` as NeMo-RL's run_grpo.py calls it (the age from the recipe)."""
    getattr(grpo_module, ASYNC_TRAIN)(
        policy,
        *train_arguments(args),
        max_trajectory_age_steps=max_trajectory_age_steps,
    )


def train_args_fit(params: list) -> bool:
    """A loop's parameters take `GrpoTrainArgs` by position (logger 9th, master_config 12th)."""
    pos = [p.name for p in params if p.kind in ("pos", "posonly")]
    return pos[8:9] == ["logger"] and pos[11:12] == ["master_config"]


def _check_grpo_train_args(src: Source) -> str | None:
    params = ast_params(src.function(GRPO, "grpo_train"))
    later = [p.name for p in params[12:] if not p.default]
    fine = train_args_fit(params) and not later
    return None if fine else f"grpo_train{render(params)}"


GRPO_TRAIN_SEAM = Seam(
    "grpo_train arguments", GRPO, "grpo_train",
    "grpo_train(policy, ..., logger as the 9th, checkpointer, save_state, master_config as "
    "the 12th)",
    f"GrpoTrainArgs ({_HERE}) passes them by position",
    _check_grpo_train_args,
)  # fmt: skip


# What the driver takes from `setup`'s return tuple, by position: the names NeMo-RL returns
# (None: a value the driver leaves alone).
SETUP_RETURNS = (
    "policy", "policy_generation", None, None, "dataloader", "val_dataloader", "loss_fn", "logger",
    "checkpointer", "grpo_save_state", "master_config",
)  # fmt: skip


def train_args_from_setup(
    setup_result: tuple, *, tokenizer: Any, task_to_env: Any, val_task_to_env: Any
) -> tuple[Any, GrpoTrainArgs]:
    """(policy, `grpo_train`'s arguments) from `setup`'s return tuple, read by position; the
    loss is setup's own (`dataclasses.replace` puts another in)."""
    got = {name: v for name, v in zip(SETUP_RETURNS, setup_result) if name}
    return got["policy"], GrpoTrainArgs(
        got["policy_generation"],
        got["dataloader"],
        got["val_dataloader"],
        tokenizer,
        got["loss_fn"],
        task_to_env,
        val_task_to_env,
        got["logger"],
        got["checkpointer"],
        got["grpo_save_state"],
        got["master_config"],
    )


def _check_setup_returns(src: Source) -> str | None:
    returned = [
        n.value.elts
        for n in own_nodes(src.function(GRPO, "setup"))
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)
    ]
    if not returned:
        return "setup returns no tuple"
    for elts in returned:
        names = [ast.unparse(e) for e in elts]
        for i, want in enumerate(SETUP_RETURNS):
            if want and names[i : i + 1] != [want]:
                return (
                    f"setup returns ({', '.join(names)}); the driver reads {want} at position {i}"
                )
    return None


SETUP_RETURNS_SEAM = Seam(
    "setup's return", GRPO, "setup",
    "setup returning (policy, policy_generation, _, _, dataloader, val_dataloader, loss_fn, logger, "
    "checkpointer, grpo_save_state, master_config, ...)",
    f"train_args_from_setup ({_HERE}) reads them by position: SETUP_RETURNS names each",
    _check_setup_returns,
)  # fmt: skip


# ------------------------------------------------------------------------------ 4. the policy


if TYPE_CHECKING:  # NeMo-RL's Policy, the policy mixin's base for type checkers (lazy at run time)
    from nemo_rl.models.policy.lm_policy import Policy as PolicyBase  # noqa: F401


def batched_data(columns: dict[str, Any]) -> Any:
    """NeMo-RL's `BatchedDataDict` of `columns` (what the policy's methods take)."""
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    return BatchedDataDict(columns)


def policy_class(mixin: type, **attrs: Any) -> type:
    """NeMo-RL's `Policy` under `mixin` (its overrides first, `super()` reaches `Policy`), with
    `attrs` as class attributes: the class `setup(policy_factory=)` builds the policy from."""
    from nemo_rl.models.policy.lm_policy import Policy

    return type("ClipoPolicy", (mixin, Policy), attrs)


def actor_python_env(fqn: str) -> str | None:
    """The Python NeMo-RL's actor registry gives the Ray actor class `fqn` (None: none)."""
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY

    return ACTOR_ENVIRONMENT_REGISTRY.get(fqn)


def register_actor_python_env(fqn: str, py_executable: str) -> None:
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY

    ACTOR_ENVIRONMENT_REGISTRY[fqn] = py_executable


def stock_worker_python() -> str:
    """The Python NeMo-RL's registry resolves for its own Megatron policy worker actor."""
    from nemo_rl.distributed.ray_actor_environment_registry import get_actor_python_env

    return get_actor_python_env(STOCK_MEGATRON_WORKER_FQN)


def default_venv_dir() -> str:
    """Where NeMo-RL keeps its actors' prefetched venvs unless `NEMO_RL_VENV_DIR` says otherwise."""
    from nemo_rl.utils.venvs import DEFAULT_VENV_DIR

    return DEFAULT_VENV_DIR


def _check_policy_factory(src: Source) -> str | None:
    setup = src.function(GRPO, "setup")
    if "policy_factory" not in {p.name for p in ast_params(setup)}:
        return f"setup{render(ast_params(setup))}: no policy_factory parameter"
    kws = {k.arg for n in ast.walk(setup) if isinstance(n, ast.Call) for k in n.keywords}
    return None if "weights_path" in kws else "setup passes weights_path= to no call"


POLICY_FACTORY_SEAM = Seam(
    "policy factory", GRPO, "setup",
    "setup(..., policy_factory=) building the policy with weights_path=",
    f"the driver passes policy_class(...) ({_HERE}) as policy_factory",
    _check_policy_factory,
)  # fmt: skip

SEAMS: tuple[Seam, ...] = (
    ESTIMATOR_SEAM, ITERATOR_SEAM, GRPO_TRAIN_SEAM, SETUP_RETURNS_SEAM, POLICY_FACTORY_SEAM,
)  # fmt: skip


# ------------------------------------------------------ async_grpo_train (checked when it runs)


def method_calls(fn: ast.AST, attr: str) -> list[ast.Call]:
    """The calls `<anything>.attr(...)` in `fn` (a policy method, say), in source order."""
    return [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
    ]


def _check_async(src: Source) -> str | None:
    """async_grpo_train: the estimator by the module-level name, grpo_train's 12 arguments then
    max_trajectory_age_steps, and prev_logprobs (the pass CLIPO pools in) before advantages."""
    fn = src.function(GRPO, ASYNC_TRAIN)
    moved = rebindable(src, GRPO, fn, ESTIMATOR, "estimator")
    if moved:
        return moved
    params = ast_params(fn)
    if not train_args_fit(params) or not any(p.name == "max_trajectory_age_steps" for p in params):
        return f"{ASYNC_TRAIN}{render(params)}"
    logprobs, advantages = method_calls(fn, "get_logprobs"), method_calls(fn, "compute_advantage")
    if not logprobs or not advantages or logprobs[0].lineno > advantages[0].lineno:
        return f"{ASYNC_TRAIN} does not call policy.get_logprobs before compute_advantage"
    return None


ASYNC_SEAM = Seam(
    "async_grpo_train", GRPO, ASYNC_TRAIN,
    f"{ASYNC_TRAIN}(policy, <grpo_train's arguments>, max_trajectory_age_steps=) building its "
    f"estimator with the module-level {ESTIMATOR}(master_config) and calling "
    "policy.get_logprobs before compute_advantage",
    f"call_async_grpo_train ({_HERE}) and advantage_estimator_installed (port/rebinding.py): "
    "point them at what "
    f"{ASYNC_TRAIN} does now",
    _check_async,
)  # fmt: skip

# Checked by the preflight for a recipe async_grpo_train runs (loops.ASYNC_GRPO_TRAIN) only: a
# synchronous run does not depend on them.
ASYNC_SEAMS: tuple[Seam, ...] = (ASYNC_SEAM,)
