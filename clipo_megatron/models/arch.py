# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`GPTArch`: the shape of a decoder-only Llama-family model, as plain data.

It lives below Megatron so that HF conversion and generation can name a
model's architecture without importing megatron.core; `runner.model.model_builder`
turns it into a TransformerConfig and a GPTModel.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GPTArch:
    """Architecture of a decoder-only Llama-family model (RMSNorm, SwiGLU, RoPE, GQA)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_query_groups: int
    ffn_hidden_size: int
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    qkv_bias: bool = False

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} not divisible by num_attention_heads={self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_query_groups:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} not divisible by num_query_groups={self.num_query_groups}"
            )
