# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""FLOP counts from the model's shapes, against hand-computed numbers and a counted matmul."""

from __future__ import annotations

import pytest

from clipo_megatron.models.arch import GPTArch
from clipo_megatron.models.flops import (
    forward_flops,
    generation_flops,
    linear_flops_per_token,
    pass_flops,
)
from clipo_testkit.tiny_models import hf_llama_config_of

# H = 8, 2 heads of 4, 1 KV group (kv dim 4), F = 16, V = 10, 3 layers
ARCH = GPTArch(
    vocab_size=10,
    hidden_size=8,
    num_layers=3,
    num_attention_heads=2,
    num_query_groups=1,
    ffn_hidden_size=16,
)


def test_linear_flops_per_token_by_hand():
    qkv = 2 * 8 * (8 + 4 + 4)  # 256
    proj = 2 * 8 * 8  # 128
    mlp = 3 * 2 * 8 * 16  # 768
    assert linear_flops_per_token(ARCH) == 3 * (qkv + proj + mlp) == 3456


def test_forward_and_pass_flops_by_hand():
    # 2 rows x 5 tokens: linear 10 * 3456, logits 2*8*10 per token, attention 4*8*3 * 2 * 25
    want = 10 * 3456 + 10 * 160 + 4 * 8 * 3 * 2 * 25
    assert forward_flops(ARCH, 2, 5) == want
    assert pass_flops(ARCH, [(2, 5), (1, 3)], backward=True) == 3 * (
        want + forward_flops(ARCH, 1, 3)
    )
    # prefill computes the last position's logits only
    assert forward_flops(ARCH, 2, 5, logits_per_row=1) == want - 8 * 160


def test_generation_flops_by_hand():
    # 12 prefilled + 6 decoded tokens, 3 sequences: logits at 3 prompt ends + 6 decode steps
    assert generation_flops(ARCH, 12, 6, 3) == 18 * 3456 + 9 * 160


def test_counts_match_torch_flop_counter_on_a_real_llama():
    """torch's FLOP counter over an HF Llama of this shape (eager attention: explicit matmuls)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    cfg = hf_llama_config_of(ARCH, tie_word_embeddings=False, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg).eval()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(torch.randint(0, 10, (2, 5)))
    assert fc.get_total_flops() == forward_flops(ARCH, 2, 5)
