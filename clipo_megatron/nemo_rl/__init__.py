# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO for NeMo-RL (Megatron-Core backend).

Everything here imports without NeMo-RL; the pieces that subclass or call
NeMo-RL classes import it lazily (inside functions) and raise
`NemoRLMissingError` with install instructions when it is absent.

Targets NeMo-RL commit `NEMO_RL_COMMIT` (main, 2026-08-22; v0.7.0 + fixes).
See docs/nemo_rl.md.
"""

from __future__ import annotations

import importlib.util

NEMO_RL_COMMIT = "7ea279abfbeb698b092856d0dab61e7cf39bc909"
NEMO_RL_RELEASE = "v0.7.0"
INSTALL_HINT = (
    "NeMo-RL is not installed. It is not on PyPI (the `nemo-rl` name there is a placeholder); install it "
    f"from its repository: `git clone https://github.com/NVIDIA-NeMo/RL && cd RL && git checkout {NEMO_RL_COMMIT[:7]} "
    "&& uv sync --extra mcore` (see docs/nemo_rl.md)."
)


class NemoRLMissingError(ImportError):
    pass


def nemo_rl_available() -> bool:
    return importlib.util.find_spec("nemo_rl") is not None


def require_nemo_rl() -> None:
    if not nemo_rl_available():
        raise NemoRLMissingError(INSTALL_HINT)


__all__ = [
    "INSTALL_HINT",
    "NEMO_RL_COMMIT",
    "NEMO_RL_RELEASE",
    "NemoRLMissingError",
    "nemo_rl_available",
    "require_nemo_rl",
]
