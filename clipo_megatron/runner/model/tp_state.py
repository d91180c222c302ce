# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Tensor-parallel shards of a Llama-layout GPTModel state dict, and back.

Checkpoints and the generator's weight sync use the full (TP = 1) layout, so a
run saved at one TP size resumes at another and the HF converter never sees a
shard. The layouts, per Megatron-Core's parallel linears:
- column parallel (dim 0): `linear_qkv` (its fused per-query-group layout makes
  a dim-0 chunk a set of whole query groups), vocab-parallel embedding / output
  layer; `linear_fc1` is [gate; up], so each rank holds [gate_r; up_r], never a
  plain dim-0 chunk of the concatenation;
- row parallel (dim 1): `linear_proj`, `linear_fc2`;
- replicated: the norms.
"""

from __future__ import annotations

import torch

ROW_PARALLEL = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")
COLUMN_PARALLEL = (
    "self_attention.linear_qkv.weight",
    "self_attention.linear_qkv.bias",
    "embedding.word_embeddings.weight",
    "output_layer.weight",
)
GATED = ("mlp.linear_fc1.weight",)
REPLICATED = ("layernorm.weight", "final_layernorm.weight")


def layout(name: str) -> str:
    """ "row", "column", "gated" or "replicated" for a GPTModel parameter / state-dict name."""
    for kind, suffixes in (
        ("row", ROW_PARALLEL),
        ("column", COLUMN_PARALLEL),
        ("gated", GATED),
        ("replicated", REPLICATED),
    ):
        if name.endswith(suffixes):
            return kind
    raise ValueError(f"{name}: no tensor-parallel layout known for this GPTModel tensor")


def check_divisible(arch, tp: int) -> None:
    """Clear errors for the TP sizes a model cannot be split into."""
    for what, n in (
        ("num_attention_heads", arch.num_attention_heads),
        ("num_query_groups", arch.num_query_groups),
        ("ffn_hidden_size", arch.ffn_hidden_size),
        ("vocab_size", arch.vocab_size),
    ):
        if n % tp:
            raise ValueError(f"parallel.tp={tp} does not divide the model's {what}={n}")


def shard(name: str, full: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """Rank `rank`'s piece of a full tensor."""
    kind = layout(name)
    if size == 1 or kind == "replicated":
        return full.clone()
    if kind == "row":
        return full.chunk(size, dim=1)[rank].clone()
    if kind == "column":
        return full.chunk(size, dim=0)[rank].clone()
    gate, up = full.chunk(2, dim=0)
    return torch.cat([gate.chunk(size, dim=0)[rank], up.chunk(size, dim=0)[rank]], 0)


def unshard(name: str, pieces: list[torch.Tensor]) -> torch.Tensor:
    """The full tensor from every rank's piece, in rank order."""
    kind = layout(name)
    if len(pieces) == 1 or kind == "replicated":
        return pieces[0].clone()
    if kind == "row":
        return torch.cat(pieces, 1)
    if kind == "column":
        return torch.cat(pieces, 0)
    halves = [p.chunk(2, dim=0) for p in pieces]
    return torch.cat([h[0] for h in halves] + [h[1] for h in halves], 0)


def gather_tensor(name: str, local: torch.Tensor, tp_group) -> torch.Tensor:
    """All-gather one tensor's pieces over `tp_group` and reassemble it (every rank gets the full tensor)."""
    import torch.distributed as dist

    size = 1 if tp_group is None else dist.get_world_size(tp_group)
    if size == 1 or layout(name) == "replicated":
        return local.detach().clone()
    pieces = [torch.empty_like(local) for _ in range(size)]
    dist.all_gather(pieces, local.detach().contiguous(), group=tp_group)
    return unshard(name, pieces)
