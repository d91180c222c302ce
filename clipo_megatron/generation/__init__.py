# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Rollout generation backends (HF transformers on CPU; vLLM where installed)."""

# The backend names a config may name (`rollout.backend`, `eval --backend`): a constant of the
# package, so configs validate them without importing the factory.
BACKENDS = ("auto", "hf", "vllm")
