# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""FLOPs of the policy's passes, counted from the model's shapes (bench tables: work done, FLOP/s).

A multiply-add is 2 FLOPs. Per token and layer of a Llama-style decoder (GQA, SwiGLU):
QKV 2*H*(H + 2*kv), output projection 2*H*H, MLP 3 matmuls 2*H*F each; the output layer
2*H*V. Attention scores and the weighted sum cost 4*H*width per query token; the CPU
attention (SDPA with an explicit mask) computes the whole width x width square, so that
is what is counted (executed work, masked entries included). Backward is twice the
forward (the usual 3x for forward + backward).
"""

from __future__ import annotations

from collections.abc import Iterable


def linear_flops_per_token(arch) -> float:
    """Forward matmul FLOPs per token, all layers, without attention scores and output layer."""
    h, f = arch.hidden_size, arch.ffn_hidden_size
    kv = h // arch.num_attention_heads * (arch.num_query_groups or arch.num_attention_heads)
    per_layer = 2 * h * (h + 2 * kv) + 2 * h * h + 3 * 2 * h * f
    return float(arch.num_layers * per_layer)


def forward_flops(arch, rows: int, width: int, *, logits_per_row: int | None = None) -> float:
    """One forward over `rows` x `width` tokens (padding included: it is computed).

    logits_per_row: positions whose logits are computed (default: all `width`; generation's
    prefill computes only the last one).
    """
    tokens = rows * width
    out_layer = (
        2
        * arch.hidden_size
        * arch.vocab_size
        * rows
        * (width if logits_per_row is None else logits_per_row)
    )
    attention = 4 * arch.hidden_size * arch.num_layers * rows * width * width
    return tokens * linear_flops_per_token(arch) + out_layer + attention


def pass_flops(arch, shapes: Iterable[tuple[int, int]], *, backward: bool = False) -> float:
    """A pass over micro-batches of (rows, width); x3 with the backward."""
    fwd = sum(forward_flops(arch, r, w) for r, w in shapes)
    return 3 * fwd if backward else fwd


def generation_flops(arch, prefill_tokens: int, decode_tokens: int, sequences: int) -> float:
    """Matmul FLOPs of generation: prefill without logits except each sequence's last position,
    decode with the output layer per token (attention over the cache left out: < 5 % here)."""
    lin = linear_flops_per_token(arch)
    out = 2 * arch.hidden_size * arch.vocab_size
    return (prefill_tokens + decode_tokens) * lin + (sequences + decode_tokens) * out
