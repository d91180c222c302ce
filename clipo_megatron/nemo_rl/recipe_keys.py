# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Reading NeMo-RL's keys in a recipe beyond a dotted read (`port/master_config.py`): whether a
key is set by interpolation, which key turns the leave-one-out baseline on. The rules on those
keys are `nemo_rl/config.py`'s."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from clipo_megatron.nemo_rl.port.master_config import as_conf, dotted_get


def is_interpolation(conf: DictConfig, key: str) -> bool:
    """Whether an unresolved recipe sets the dotted `key` by interpolation (`${...}`)."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(conf, parent, throw_on_resolution_failure=False) if parent else conf
    return isinstance(node, DictConfig) and leaf in node and OmegaConf.is_interpolation(node, leaf)


def leave_one_out_key(cfg: dict[str, Any] | DictConfig) -> str | None:
    """The key that turns NeMo-RL's leave-one-out baseline on, None when it is off. Both are
    read (the estimator's and the dynamic-sampling std's); NeMo-RL's default for each is on."""
    conf = as_conf(cfg)  # wrapped once for the keys read below
    est = dotted_get(conf, "grpo.adv_estimator.use_leave_one_out_baseline")
    if est:
        return "grpo.adv_estimator.use_leave_one_out_baseline"
    top = dotted_get(conf, "grpo.use_leave_one_out_baseline", True, none_is_default=True)
    return "grpo.use_leave_one_out_baseline" if top else None
