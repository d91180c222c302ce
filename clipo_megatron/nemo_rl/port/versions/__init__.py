# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The NeMo-RL versions CLIPO supports: one module here per version, found by listing this folder.

Each module names its commit, its package version, the probes that recognise it without a commit,
its rebindings and its seam table (`version.VERSION_MODULE_NAMES`). Supporting another NeMo-RL
commit is one new module here, made from the newest one, plus its contract run
(`scripts/test_nemo_rl.sh` with `NEMO_RL_SRC` at that checkout; CONTRIBUTING.md).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from clipo_megatron.nemo_rl.port.version import VERSION_MODULE_NAMES


def _discover() -> tuple[ModuleType, ...]:
    found = [
        importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
    ]
    for module in found:
        missing = [n for n in VERSION_MODULE_NAMES if not hasattr(module, n)]
        if missing:
            raise ImportError(f"{module.__name__} defines no {', '.join(missing)} (version.py)")
    return tuple(sorted(found, key=lambda m: m.DATE))


SUPPORTED: tuple[ModuleType, ...] = _discover()  # oldest first


def names() -> list[str]:
    return [v.NAME for v in SUPPORTED]


def by_name(name: str) -> ModuleType:
    return next(v for v in SUPPORTED if v.NAME == name)


def newest() -> ModuleType:
    """The version the install hint recommends and an unknown NeMo-RL is checked against."""
    return SUPPORTED[-1]
