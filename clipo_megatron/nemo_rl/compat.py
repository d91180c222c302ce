# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which NeMo-RL is installed, and whether this integration supports it.

Supported (each run by the contract suite, `scripts/test_nemo_rl.sh`; docs/nemo_rl.md):

    v0.7.0             release of 2026-07-28 (`nemo_rl.__version__ == "0.7.0"`)
    main@7ea279a       main of 2026-08-22; its package_info still says 0.6.0, so it is told
                       apart from the real v0.6.0 by a seam v0.6.0 lacks (`MetricNormalizer`)

Anything else fails at start-up with `UnsupportedNemoRLError` naming the version found,
before a model or a Ray actor is built. `CLIPO_ALLOW_UNSUPPORTED_NEMO_RL=1` turns the
error into a warning for users who have run the contract suite against their own checkout.
"""

from __future__ import annotations

import importlib
import os
import warnings
from dataclasses import dataclass

SUPPORTED = {
    "v0.7.0": "release v0.7.0 (2026-07-28)",
    "main@7ea279a": "main at 7ea279abfbeb698b092856d0dab61e7cf39bc909 (2026-08-22)",
}
ALLOW_ENV = "CLIPO_ALLOW_UNSUPPORTED_NEMO_RL"


class UnsupportedNemoRLError(RuntimeError):
    pass


@dataclass(frozen=True)
class NemoRLFlavour:
    """What is installed: `name` is a key of SUPPORTED, or None for an unsupported NeMo-RL."""

    version: str  # nemo_rl.__version__
    name: str | None
    has_metric_normalizer: bool  # loss interface declares metric normalisations (main only)

    @property
    def supported(self) -> bool:
        return self.name is not None


def detect() -> NemoRLFlavour:
    """Identify the importable NeMo-RL (raises NemoRLMissingError without one)."""
    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    version = str(getattr(importlib.import_module("nemo_rl"), "__version__", "unknown"))
    interfaces = importlib.import_module("nemo_rl.algorithms.loss.interfaces")
    has_norm = hasattr(interfaces, "MetricNormalizer")
    name = None
    if version == "0.7.0" and not has_norm:
        name = "v0.7.0"
    elif version == "0.6.0" and has_norm:
        name = "main@7ea279a"
    return NemoRLFlavour(version=version, name=name, has_metric_normalizer=has_norm)


def check_supported() -> NemoRLFlavour:
    """Fail early, naming the version, when the installed NeMo-RL is not one we test against."""
    flavour = detect()
    if flavour.supported:
        return flavour
    supported = "; ".join(f"{k}: {v}" for k, v in SUPPORTED.items())
    msg = (
        f"NeMo-RL {flavour.version} (MetricNormalizer "
        f"{'present' if flavour.has_metric_normalizer else 'absent'}) is not supported by this "
        f"clipo_megatron. Supported: {supported}. Install one of them (docs/nemo_rl.md), or run "
        f"`NEMO_RL_SRC=<your checkout> bash scripts/test_nemo_rl.sh` and, if it passes, set "
        f"{ALLOW_ENV}=1."
    )
    if os.environ.get(ALLOW_ENV) == "1":
        warnings.warn(msg, stacklevel=2)
        return flavour
    raise UnsupportedNemoRLError(msg)
