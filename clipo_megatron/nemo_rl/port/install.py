# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL is imported lazily: it is not on PyPI, and most of the project runs without it. The
pieces that need it call `require_nemo_rl()` first, so its absence is one line saying how to
install a supported version (the newest in `versions/`), not an ImportError deep in a call."""

from __future__ import annotations

import importlib.util

from clipo_megatron.nemo_rl.port import versions

INSTALL_HINT = (
    "NeMo-RL is not installed. It is not on PyPI (the `nemo-rl` name there is a placeholder); install "
    "it from its repository: `git clone https://github.com/NVIDIA-NeMo/RL && cd RL && git checkout "
    f"{versions.newest().COMMIT[:9]} && uv sync --extra mcore` (supported: "
    f"{', '.join(versions.names())}; see docs/nemo_rl.md)."
)


class NemoRLMissingError(ImportError):
    pass


def nemo_rl_available() -> bool:
    return importlib.util.find_spec("nemo_rl") is not None


def require_nemo_rl() -> None:
    if not nemo_rl_available():
        raise NemoRLMissingError(INSTALL_HINT)
