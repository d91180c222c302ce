# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Alias of `clipo_megatron.verify.choice` (the name `nemo_rl/data.py` imports)."""

from clipo_megatron.verify.choice import extract_choice, verify_choice

__all__ = ["extract_choice", "verify_choice"]
