# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Counter-based, seeded uniform draws for InfoNCE positive sampling.

The authors draw the positive with an unseeded `torch.multinomial`, so two
ranks that compute the same anchor can silently disagree. Here the draw for
anchor i is a pure function of (seed, step, group id, sample id): a small
integer hash, like a Philox counter. Every TP/CP/PP/DP rank computes the same
positive with no communication, whatever the batch order or sharding.
"""

from __future__ import annotations

import torch

_M31 = (1 << 31) - 1
# Odd multipliers below 2**31 so every product fits in int64 without overflow.
_MULTS = (0x45D9F3B, 0x119DE1F3, 0x2C1B3C6D)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x & _M31
    for m in _MULTS:
        x = (((x >> 16) ^ x) * m) & _M31
    return (x >> 16) ^ x


def _fold(x: torch.Tensor) -> torch.Tensor:
    """Fold an arbitrary int64 into 31 bits (keeps both halves)."""
    x = x.long()
    return (x & _M31) ^ ((x >> 31) & _M31) ^ ((x >> 62) & 3)


def counter_uniform(seed: int, step: int, *keys: torch.Tensor) -> torch.Tensor:
    """Deterministic U[0, 1) per element of the broadcast `keys` (int tensors)."""
    shape = torch.broadcast_shapes(*(k.shape for k in keys))
    device = keys[0].device
    h = torch.full(shape, 0, dtype=torch.long, device=device)
    h = _mix(h + _fold(torch.tensor(seed, device=device)))
    h = _mix(h ^ _fold(torch.tensor(step, device=device)) + 0x9E3779B)
    for k in keys:
        h = _mix((h * 31 + _fold(k)) & _M31)
    return h.double() / float(1 << 31)


def sample_positive_slots(
    positive_mask: torch.Tensor,
    uniform: torch.Tensor,
) -> torch.Tensor:
    """Pick, per row, one slot uniformly among the True entries of `positive_mask`.

    positive_mask: [N, G, G] bool, row (n, i) marks the positives of anchor i.
    uniform: [N, G] draws in [0, 1). Returns [N, G] long slot index, -1 if none.
    """
    num_pos = positive_mask.sum(-1)  # [N, G]
    k = torch.clamp((uniform * num_pos).floor().long(), max=(num_pos - 1).clamp_min(0))  # [N, G]
    rank = torch.cumsum(positive_mask.long(), -1) - 1  # [N, G, G] rank of each positive
    hit = positive_mask & (
        rank == k.unsqueeze(-1)
    )  # [N, G, G] exactly one True per row with positives
    slot = hit.long().argmax(-1)  # [N, G]
    return torch.where(num_pos > 0, slot, torch.full_like(slot, -1))
