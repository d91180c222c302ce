# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's integration keys: every rule on the master-config keys CLIPO reads or constrains.

The `clipo:` block's own rules are core/config.py's; here are the knobs only this driver adds to
it (`ClipoNemoRLConfig`), the ranges and switches of NeMo-RL's keys (`NEMO_RL_RANGES`,
`NEMO_RL_SWITCHES`) and the cross-field rules between `clipo:` and NeMo-RL's blocks
(`validate_master_config`). Recipes are merged by `guard/recipes.py` `load_recipe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from clipo_megatron.core import bounds
from clipo_megatron.core.bounds import Range, bool_problem
from clipo_megatron.core.config import ClipoBlock
from clipo_megatron.nemo_rl.loss_functions import (
    check_objective_loss_switches,
    objective_settings,
    uses_clipped_pg,
)
from clipo_megatron.nemo_rl.port.master_config import as_conf, dotted_get
from clipo_megatron.nemo_rl.recipe_keys import (
    is_interpolation,
    leave_one_out_key,
)


@dataclass
class ClipoNemoRLConfig(ClipoBlock):
    """The core `clipo:` block (core/config.py) plus the knobs only the NeMo-RL driver has."""

    # Shard the head's output dim over TP (column parallel); else replicate it.
    head_tensor_parallel: bool = False
    # Sub-directory of a NeMo-RL checkpoint (step_N/) holding the head state.
    head_checkpoint_dir: str = "clipo_head"
    # Drop prompts over data.max_input_seq_length tokens before the run, as verl's
    # filter_overlong_prompts (nemo_rl/prompt_filter.py); false: NeMo-RL's truncate-and-mask.
    drop_overlong_prompts: bool = False
    # Pool y1..yT (true) or y1..y(T-1), the authors' SGLang patch (megatron/pooling/positions.py).
    pool_last_token: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.head_checkpoint_dir or "/" in self.head_checkpoint_dir:
            raise ValueError(
                f"clipo.head_checkpoint_dir={self.head_checkpoint_dir!r} must be a plain directory name"
            )
        for key in ("drop_overlong_prompts", "pool_last_token"):
            if problem := bool_problem(f"clipo.{key}", getattr(self, key)):
                raise ValueError(problem)


# NeMo-RL's sampling and optimizer knobs under the rules the runner's share (core/bounds.py);
# a key the recipe leaves out (or null) is NeMo-RL's default and not checked here.
NEMO_RL_RANGES: dict[str, Range] = {
    "grpo.num_prompts_per_step": Range(1, 65536, integer=True),
    "grpo.num_generations_per_prompt": bounds.ROLLOUTS_PER_PROMPT,
    "grpo.max_num_steps": bounds.RL_STEPS,
    "policy.train_global_batch_size": Range(1, integer=True),
    "policy.megatron_cfg.tensor_model_parallel_size": Range(1, 1024, integer=True),
    "policy.megatron_cfg.pipeline_model_parallel_size": Range(1, 1024, integer=True),
    "policy.megatron_cfg.context_parallel_size": Range(1, 1024, integer=True),
    "policy.generation.vllm_cfg.tensor_parallel_size": Range(1, 1024, integer=True),
    "policy.train_micro_batch_size": Range(1, integer=True),
    "policy.make_sequence_length_divisible_by": Range(1, integer=True),
    "policy.max_total_sequence_length": Range(1, integer=True),
    "cluster.num_nodes": Range(1, integer=True),
    "cluster.gpus_per_node": Range(1, integer=True),
    "policy.generation.temperature": bounds.ROLLOUT_TEMPERATURE,
    "policy.generation.top_p": bounds.TOP_P,
    "policy.megatron_cfg.optimizer.lr": bounds.LEARNING_RATE,
    "policy.megatron_cfg.optimizer.weight_decay": bounds.WEIGHT_DECAY,
    # Megatron's clip_grad: 0 turns clipping off (the runner's grad_clip has no "off").
    "policy.max_grad_norm": Range(0, note="0: no clipping, Megatron's clip_grad; paper 1.0"),
    "loss_fn.ratio_clip_min": bounds.CLIP_EPS,
    "loss_fn.ratio_clip_max": bounds.CLIP_EPS,
    "loss_fn.reference_policy_kl_penalty": bounds.KL_COEF,
}


# Switches the cross-field rules read: a bool each, since a string there ("abc", "no") is truthy.
NEMO_RL_SWITCHES = (
    "policy.megatron_cfg.enabled",
    "policy.dtensor_cfg.enabled",
    "policy.sequence_packing.enabled",
    "policy.dynamic_batching.enabled",
    "grpo.use_leave_one_out_baseline",
)


def knob_problems(cfg: dict[str, Any], derived: frozenset[str] = frozenset()) -> list[str]:
    """One line per NEMO_RL_RANGES key out of its range and per NEMO_RL_SWITCHES key that is
    not true / false, naming the key as the recipe spells it. `derived`: keys the recipe sets
    by interpolation (`${...}`), whose bad value is its source's, named there."""
    conf = as_conf(cfg)  # wrapped once for the keys read below
    problems = [
        problem
        for key in NEMO_RL_SWITCHES
        if key not in derived
        and (value := dotted_get(conf, key)) is not None
        and (problem := bool_problem(key, value))
    ]
    for key, rule in NEMO_RL_RANGES.items():
        if key in derived:
            continue
        value = dotted_get(conf, key)
        if value is not None:
            try:
                rule.check(key, value)
            except ValueError as e:
                problems.append(str(e))
    return problems


def interpolated_keys(raw: dict[str, Any]) -> frozenset[str]:
    """The checked keys an unresolved recipe sets by interpolation (`${...}`)."""
    conf = as_conf(raw)
    return frozenset(k for k in (*NEMO_RL_RANGES, *NEMO_RL_SWITCHES) if is_interpolation(conf, k))


def validate_master_config(cfg: dict[str, Any]) -> ClipoNemoRLConfig:
    """The typed `clipo:` block of a recipe whose keys pass every rule here (else ValueError
    naming the clashing keys and the fix)."""
    conf = as_conf(cfg)  # wrapped once for the keys read below
    # NeMo-RL's own keys first: clipo_base.yaml sets clipo.method.max_group_size to
    # ${grpo.num_generations_per_prompt}, and a bad n was reported under the clipo key.
    problems = knob_problems(cfg)
    if problems:
        raise ValueError(problems[0])
    clipo = ClipoNemoRLConfig.from_dict(cfg.get("clipo"))
    env = cfg.get("env") or {}
    if "clipo_math" in env:  # the verifier's keys, before any actor starts
        from clipo_megatron.nemo_rl.env_grading import EnvSettings

        EnvSettings.from_cfg(env["clipo_math"])
    _check_backend_and_layout(conf, clipo)
    _check_group_and_batch(conf, clipo)
    est = dotted_get(conf, "grpo.adv_estimator.name", "grpo")
    if clipo.head_runs and est != "grpo":
        raise ValueError(
            f"grpo.adv_estimator.name={est!r}: CLIPO adds its reward before GRPO's group "
            "normalisation and wraps the 'grpo' estimator only; set grpo.adv_estimator.name=grpo"
        )

    if clipo.head_runs:
        _check_capture_runs(conf)
    _check_objective_settings(cfg, clipo)
    return clipo


def _check_group_and_batch(conf, clipo: ClipoNemoRLConfig) -> None:
    """The group size, steps and baseline against CLIPO's rules, and the batch against GBS."""
    n_gen = int(dotted_get(conf, "grpo.num_generations_per_prompt", 0))
    n_prompts = int(dotted_get(conf, "grpo.num_prompts_per_step", 0))
    max_steps = dotted_get(conf, "grpo.max_num_steps")
    loo_key = leave_one_out_key(conf)
    clipo.check_run(  # the rules shared with the runner (core/config.py ClipoBlock)
        n=n_gen,
        steps=None if max_steps is None else int(max_steps),
        leave_one_out=loo_key is not None,
        keys={
            "n": "grpo.num_generations_per_prompt",
            "steps": "grpo.max_num_steps",
            "leave_one_out": loo_key or "grpo.use_leave_one_out_baseline",
        },
    )
    gbs = dotted_get(conf, "policy.train_global_batch_size")
    if gbs is not None and n_prompts and (n_prompts * n_gen) % int(gbs):
        raise ValueError(
            f"grpo.num_prompts_per_step * num_generations_per_prompt = {n_prompts * n_gen} is not a "
            f"multiple of policy.train_global_batch_size={gbs}"
        )


def _check_backend_and_layout(conf, clipo: ClipoNemoRLConfig) -> None:
    """NeMo-RL's Megatron backend, and the layouts its worker and CLIPO's head can run."""
    if not dotted_get(conf, "policy.megatron_cfg.enabled", False):
        raise ValueError(
            "policy.megatron_cfg.enabled is false: this integration runs on NeMo-RL's Megatron "
            "backend; set policy.megatron_cfg.enabled=true and policy.dtensor_cfg.enabled=false"
        )
    if dotted_get(conf, "policy.dtensor_cfg.enabled", False):
        raise ValueError(
            "policy.dtensor_cfg.enabled and policy.megatron_cfg.enabled are both true; "
            "set policy.dtensor_cfg.enabled=false"
        )
    tp = int(dotted_get(conf, "policy.megatron_cfg.tensor_model_parallel_size", 1))
    pp = int(dotted_get(conf, "policy.megatron_cfg.pipeline_model_parallel_size", 1))
    cp = int(dotted_get(conf, "policy.megatron_cfg.context_parallel_size", 1))
    if cp > 1 and not dotted_get(conf, "policy.sequence_packing.enabled", False):
        raise ValueError(
            f"policy.megatron_cfg.context_parallel_size={cp} needs policy.sequence_packing.enabled=true "
            "(NeMo-RL shards CP only on packed sequences)"
        )
    if pp > 1 and dotted_get(conf, "policy.dynamic_batching.enabled", False):
        raise ValueError(
            f"policy.megatron_cfg.pipeline_model_parallel_size={pp} is incompatible with "
            "policy.dynamic_batching.enabled=true in NeMo-RL; use policy.sequence_packing instead"
        )
    if clipo.head_tensor_parallel and clipo.method.embed_dim % tp:
        raise ValueError(
            f"clipo.method.embed_dim={clipo.method.embed_dim} is not divisible by tensor_model_parallel_size={tp}; "
            "pick a multiple of TP or set clipo.head_tensor_parallel=false (replicated head)"
        )


ENV_NAME = "clipo_math"  # the environment the recipes' data sections name


def with_env_grader(cfg: dict[str, Any]) -> dict[str, Any]:
    """A copy of the resolved config whose `env.clipo_math.grader` is `clipo.grader`: the
    environment (a Ray actor that sees only its own `env:` entry) grades with the one key."""
    clipo = ClipoNemoRLConfig.from_dict(cfg.get("clipo"))
    env = {**(cfg.get("env") or {})}
    own = env.get(ENV_NAME) or {}
    if "grader" in own and own["grader"] != clipo.grader:
        raise ValueError(
            f"env.{ENV_NAME}.grader={own['grader']!r} but clipo.grader={clipo.grader!r}: the "
            f"grader is one key; set clipo.grader and drop env.{ENV_NAME}.grader"
        )
    env[ENV_NAME] = {**own, "grader": clipo.grader}
    return {**cfg, "env": env}


def _check_capture_runs(cfg: dict[str, Any] | DictConfig) -> None:
    """Settings under which CLIPO's capture never runs: it pools the final norm's output inside
    NeMo-RL's prev-logprob pass, in Python (forward hook / output processor)."""
    conf = as_conf(cfg)  # wrapped once for the keys read below
    threshold = dotted_get(conf, "grpo.seq_logprob_error_threshold")
    if dotted_get(conf, "loss_fn.force_on_policy_ratio", False) and threshold is None:
        raise ValueError(  # grpo_train's skip rule, the same in every supported version
            "loss_fn.force_on_policy_ratio=true makes NeMo-RL skip the prev-logprob pass (with "
            "grpo.seq_logprob_error_threshold unset), the pass CLIPO pools hidden states in, so "
            "the head gets nothing; set loss_fn.force_on_policy_ratio=false"
        )
    mc = "policy.megatron_cfg."
    mtp = int(dotted_get(conf, mc + "mtp_num_layers", 0, none_is_default=True))
    last = dotted_get(conf, mc + "num_layers_in_last_pipeline_stage")
    if mtp and last == 0 and int(dotted_get(conf, mc + "pipeline_model_parallel_size", 1)) > 1:
        raise ValueError(  # Megatron-Core's TransformerBlock.has_final_layernorm_in_this_stage
            f"{mc}num_layers_in_last_pipeline_stage=0 with {mc}mtp_num_layers={mtp}: Megatron-Core "
            "then puts the final norm on the stage before the last, and CLIPO pools its output on "
            "the last stage (beside the head), so the head gets nothing; give the last pipeline "
            "stage at least one decoder layer"
        )
    impl = dotted_get(conf, "policy.megatron_cfg.cuda_graph_impl", "none", none_is_default=True)
    if str(impl).lower() != "none":
        raise ValueError(
            f"policy.megatron_cfg.cuda_graph_impl={impl!r}: a replayed CUDA graph runs no Python, "
            "so CLIPO's capture of the final-norm output is not guaranteed to run; set "
            "policy.megatron_cfg.cuda_graph_impl=none"
        )


def _check_objective_settings(cfg: dict[str, Any], clipo: ClipoNemoRLConfig) -> None:
    """The `loss_fn:` / `grpo:` switches an objective is defined by, read from the registry."""
    conf = as_conf(cfg)  # wrapped once for the keys read below
    name = clipo.objective
    obj = clipo.policy_objective()  # clipo.dynamic_sampling applied
    seq_ratio = bool(dotted_get(conf, "loss_fn.sequence_level_importance_ratios", False))
    if seq_ratio != obj.sequence_level_ratio:
        raise ValueError(
            f"clipo.objective={name!r} uses a {'sequence' if obj.sequence_level_ratio else 'token'}"
            f"-level importance ratio; set loss_fn.sequence_level_importance_ratios="
            f"{str(obj.sequence_level_ratio).lower()} (or pick the objective that uses it)"
        )
    loss_cfg = dict(cfg.get("loss_fn") or {})
    objective_settings(name, loss_cfg)  # kl_gradient, ratio_clip_c in their domains
    if not uses_clipped_pg(name, loss_cfg):
        check_objective_loss_switches(name, loss_cfg)
    token_level = obj.aggregation == "token-mean"
    # token-mean / sequence mean is a free choice where Objective.loss computes it (GMPO)
    if obj.in_nemo_rl and bool(dotted_get(conf, "loss_fn.token_level_loss", True)) != token_level:
        raise ValueError(
            f"clipo.objective={name!r} aggregates {obj.aggregation} (paper App.); set "
            f"loss_fn.token_level_loss={str(token_level).lower()}"
        )
    use_ds = bool(dotted_get(conf, "grpo.use_dynamic_sampling", False))
    if obj.dynamic_sampling and not use_ds:
        raise ValueError(
            f"clipo.objective={name!r} filters groups by dynamic sampling; set "
            "grpo.use_dynamic_sampling=true (or clipo.dynamic_sampling=false to run without it)"
        )
    if clipo.dynamic_sampling is False and use_ds:
        raise ValueError(
            "clipo.dynamic_sampling=false but grpo.use_dynamic_sampling=true; set "
            "grpo.use_dynamic_sampling=false"
        )
    lo = float(dotted_get(conf, "loss_fn.ratio_clip_min", obj.eps_low))
    hi = float(dotted_get(conf, "loss_fn.ratio_clip_max", obj.eps_high))
    if obj.eps_high > obj.eps_low and hi <= lo:
        raise ValueError(
            f"clipo.objective={name!r} uses an asymmetric clip, eps_high > eps_low (paper {obj.eps_low} / "
            f"{obj.eps_high}) but loss_fn.ratio_clip_min={lo} >= ratio_clip_max={hi}"
        )
