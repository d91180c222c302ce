# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Reading NeMo-RL's keys in a recipe: by dotted key (`OmegaConf.select`), whether a key is set
by interpolation, which key turns the leave-one-out baseline on. The rules on those keys are
`nemo_rl/config.py`'s."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException


def dotted_get(
    cfg: dict | DictConfig, dotted: str, default: Any = None, *, none_is_default: bool = False
) -> Any:
    """`OmegaConf.select` on a recipe, which NeMo-RL hands around as a plain dict (wrapped here;
    wrap it once with `as_conf` where many keys are read): `default` where a key is missing (or
    null, if asked); a mapping or list comes back as a plain dict or list."""
    value = OmegaConf.select(
        as_conf(cfg), dotted, default=_MISSING, throw_on_resolution_failure=False
    )
    if value is _MISSING or (none_is_default and value is None):
        return default
    return OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value


_MISSING = object()


def as_conf(cfg: dict | DictConfig) -> DictConfig:
    """The recipe as OmegaConf's config (itself if it is one already); ValueError naming the value
    when a string in it is an interpolation that does not parse ("${oops")."""
    if isinstance(cfg, DictConfig):
        return cfg
    try:
        return OmegaConf.create(cfg, flags={"allow_objects": True})
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "a key"
        raise ValueError(
            f"{key}: not a valid OmegaConf interpolation ({str(e).splitlines()[0]}); fix the value"
        ) from None


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
