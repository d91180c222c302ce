# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The HF base model of a run (`model.source`): SmolLM2-135M-Instruct or a tiny random Llama.

Below the runner and the eval: both rebuild a run's base model from its config
(the runner to convert it to Megatron, the eval to load a run's checkpoint onto it).
"""

from __future__ import annotations

import os

import torch


def load_hf_policy(source: str, *, tiny_hidden: int = 64, tiny_layers: int = 2, seed: int = 0):
    """(HF model, tokenizer): SmolLM2-135M-Instruct, or a tiny random Llama with its tokenizer."""
    from clipo_megatron.models.smollm2 import load_smollm2, load_smollm2_tokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if source == "smollm2":
        return load_smollm2()
    import transformers

    tok = load_smollm2_tokenizer()
    cfg = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=tiny_hidden,
        intermediate_size=2 * tiny_hidden,
        num_hidden_layers=tiny_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).float().eval(), tok
