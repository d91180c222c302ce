# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Moved to tests/tiny_models.py; this name stays only until tests/nemo_rl/contract_model.py
imports from there (its owner's change), then it goes."""

from tests.tiny_models import char_tokenizer, tiny_llama_config

__all__ = ["char_tokenizer", "tiny_llama_config"]
