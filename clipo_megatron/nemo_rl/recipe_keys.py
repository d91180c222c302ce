# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own keys in a recipe: read by dotted key (`OmegaConf.select`), and the sampling,
optimizer and layout knobs held to the ranges the runner's keys have (core/bounds.py)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from clipo_megatron.core.bounds import (
    CLIP_EPS,
    KL_COEF,
    LEARNING_RATE,
    ROLLOUT_TEMPERATURE,
    ROLLOUTS_PER_PROMPT,
    TOP_P,
    WEIGHT_DECAY,
    Range,
)
from clipo_megatron.nemo_rl.port.master_config import as_conf, dotted_get  # noqa: F401 (re-read here)

# NeMo-RL's sampling and optimizer knobs under the rules the runner's share (core/bounds.py);
# a key the recipe leaves out (or null) is NeMo-RL's default and not checked here.
NEMO_RL_RANGES: dict[str, Range] = {
    "grpo.num_prompts_per_step": Range(1, 65536, integer=True),
    "grpo.num_generations_per_prompt": ROLLOUTS_PER_PROMPT,
    "grpo.max_num_steps": Range(1, integer=True),
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
    "policy.generation.temperature": ROLLOUT_TEMPERATURE,
    "policy.generation.top_p": TOP_P,
    "policy.megatron_cfg.optimizer.lr": LEARNING_RATE,
    "policy.megatron_cfg.optimizer.weight_decay": WEIGHT_DECAY,
    # Megatron's clip_grad: 0 turns clipping off (the runner's grad_clip has no "off").
    "policy.max_grad_norm": Range(0, note="0: no clipping, Megatron's clip_grad; paper 1.0"),
    "loss_fn.ratio_clip_min": CLIP_EPS,
    "loss_fn.ratio_clip_max": CLIP_EPS,
    "loss_fn.reference_policy_kl_penalty": KL_COEF,
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
        f"{key}={value!r} must be true or false"
        for key in NEMO_RL_SWITCHES
        if key not in derived
        and (value := dotted_get(conf, key)) is not None
        and not isinstance(value, bool)
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
    return frozenset(k for k in (*NEMO_RL_RANGES, *NEMO_RL_SWITCHES) if _is_interpolation(conf, k))


def _is_interpolation(conf: DictConfig, key: str) -> bool:
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(conf, parent, throw_on_resolution_failure=False) if parent else conf
    return isinstance(node, DictConfig) and leaf in node and OmegaConf.is_interpolation(node, leaf)


def check_knob_ranges(cfg: dict[str, Any]) -> None:
    """Each of NEMO_RL_RANGES' keys the recipe sets is in its range (ValueError: the first)."""
    problems = knob_problems(cfg)
    if problems:
        raise ValueError(problems[0])
