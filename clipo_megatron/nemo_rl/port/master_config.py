# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's master config as CLIPO reads it: a recipe by dotted key, and the config `setup`
returns, which is a pydantic model in some versions and a plain dict in others (`versions/`),
read here for both."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

_MISSING = object()


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


def master_config_dict(master: Any) -> dict[str, Any]:
    """`setup`'s master config as a plain dict, whichever it is."""
    return master.model_dump() if hasattr(master, "model_dump") else dict(master)


def block(master: Any, name: str) -> Any:
    """A top-level block of `setup`'s master config, as the live object NeMo-RL reads (writes to
    it reach the loop): an attribute of a pydantic config, a key of a dict."""
    return master[name] if isinstance(master, dict) else getattr(master, name)
