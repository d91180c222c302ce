# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO for NeMo-RL (Megatron-Core backend).

Everything here imports without NeMo-RL; the pieces that subclass or call NeMo-RL classes import
it lazily (inside functions) and raise `NemoRLMissingError` with install instructions when it is
absent. Everything CLIPO assumes about NeMo-RL, and the versions it supports, is in `port/`.
See docs/nemo_rl.md.
"""

from __future__ import annotations

from clipo_megatron.nemo_rl.port.install import (
    INSTALL_HINT,
    NemoRLMissingError,
    nemo_rl_available,
    require_nemo_rl,
)

__all__ = ["INSTALL_HINT", "NemoRLMissingError", "nemo_rl_available", "require_nemo_rl"]
