# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Masked mean pooling of response-token hidden states, in fp32.

h_i = mean of the final hidden states (final-norm output) over the response
tokens of rollout i; prompt tokens and padding are excluded. Every function
returns partial sums and token counts so a caller whose tokens are sharded
(sequence parallel over TP, context parallel, packed THD) can all-reduce
D + 1 floats per sequence and divide afterwards: exact, with no gather of
[S, B, D].
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import torch

Layout = Literal["bsd", "sbd"]


def masked_sum_and_count(
    hidden: torch.Tensor, mask: torch.Tensor, *, layout: Layout = "bsd"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum and count of masked tokens from padded hidden states.

    hidden: [B, S, D] ("bsd") or [S, B, D] ("sbd", Megatron's layout).
    mask: [B, S] response mask (1 = response token), in either layout.
    Returns sums [B, D] (fp32) and counts [B] (fp32).
    """
    if hidden.dim() != 3:
        raise ValueError(f"hidden must be 3-D ({layout}), got shape {tuple(hidden.shape)}")
    if layout == "sbd":
        s, b, _ = hidden.shape
        expected = (b, s)
    elif layout == "bsd":
        b, s, _ = hidden.shape
        expected = (b, s)
    else:
        raise ValueError(f"layout must be 'bsd' or 'sbd', got {layout!r}")
    if tuple(mask.shape) != expected:
        raise ValueError(
            f"mask must be [B, S]={expected} for hidden {tuple(hidden.shape)} ({layout}), got {tuple(mask.shape)}"
        )
    m = mask.to(torch.float32)  # [B, S]
    if layout == "sbd":
        sums = torch.einsum("sbd,bs->bd", hidden.float(), m)  # [B, D]
    else:
        sums = torch.einsum("bsd,bs->bd", hidden.float(), m)  # [B, D]
    return sums, m.sum(-1)


def segment_sum_and_count(
    hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum and count per segment of token rows; segment id -1 means "ignore".

    hidden: [T, D] or [T, 1, D] (packed THD, Megatron keeps a unit batch dim).
    segment_ids: [T] long in [-1, num_segments). Returns sums [num_segments, D], counts [num_segments].
    """
    if hidden.dim() == 3:
        if hidden.shape[1] != 1:
            raise ValueError(
                f"packed hidden must be [T, D] or [T, 1, D], got {tuple(hidden.shape)}"
            )
        hidden = hidden.squeeze(1)
    if hidden.dim() != 2 or segment_ids.dim() != 1 or segment_ids.shape[0] != hidden.shape[0]:
        raise ValueError(
            f"segment_ids [T] must match hidden [T, D]: {tuple(segment_ids.shape)} vs {tuple(hidden.shape)}"
        )
    if bool((segment_ids >= num_segments).any()) or bool((segment_ids < -1).any()):
        raise ValueError(f"segment_ids must lie in [-1, {num_segments})")
    keep = segment_ids >= 0
    seg = segment_ids[keep]
    sums = torch.zeros(num_segments, hidden.shape[1], dtype=torch.float32, device=hidden.device)
    counts = torch.zeros(num_segments, dtype=torch.float32, device=hidden.device)
    with deterministic_algorithms():
        sums = sums.index_add(0, seg, hidden[keep].float())
        counts = counts.index_add(0, seg, torch.ones_like(seg, dtype=torch.float32))
    return sums, counts


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """Ordered accumulation for the duration of the block.

    CUDA's `index_add` adds with atomics, in whatever order the threads land: two ranks
    that pool the same hidden states (TP replicas with sequence parallelism off) get sums
    that differ in the last bits, and NeMo-RL's driver stops on replicas that disagree.
    With deterministic algorithms on, torch runs CUDA's `index_add` in a fixed order
    (torch.use_deterministic_algorithms: "index_add when called on CUDA tensor"); the
    CPU kernel is ordered anyway. The process-global flag is restored on exit.
    """
    was_on = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=warn_only)


def packed_segment_ids(
    cu_seqlens: torch.Tensor, token_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """[T] sequence index of each packed token (THD with cu_seqlens [B+1]); -1 where masked out."""
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D [B+1], got shape {tuple(cu_seqlens.shape)}")
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    if bool((lengths < 0).any()):
        raise ValueError("cu_seqlens must be non-decreasing")
    total = int(cu_seqlens[-1])
    seg = torch.repeat_interleave(torch.arange(lengths.numel(), device=cu_seqlens.device), lengths)
    seg = torch.cat(
        [torch.full((int(cu_seqlens[0]),), -1, device=seg.device, dtype=seg.dtype), seg]
    )
    if token_mask is not None:
        if token_mask.shape[0] != total:
            raise ValueError(
                f"token_mask [T] has {token_mask.shape[0]} tokens, cu_seqlens ends at {total}"
            )
        seg = torch.where(token_mask.bool(), seg, torch.full_like(seg, -1))
    return seg


def packed_sum_and_count(
    hidden: torch.Tensor, cu_seqlens: torch.Tensor, token_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums [B, D] and counts [B] of response tokens in packed THD hidden states [T(, 1), D]."""
    seg = packed_segment_ids(cu_seqlens, token_mask)
    return segment_sum_and_count(hidden, seg, cu_seqlens.numel() - 1)


def empty_rows(counts: torch.Tensor) -> torch.Tensor:
    """[B] counts -> [B] bool: rows with no token to pool (an empty response, or a one-token
    answer whose last token is left out). The one rule of what "empty" means; CLIPO leaves
    such rows out of its contrastive set (`core/contrastive_loss.py`, `member`)."""
    return counts <= 0


def mean_from_sums(
    sums: torch.Tensor, counts: torch.Tensor, *, allow_empty: bool = False
) -> torch.Tensor:
    """Finish the mean after any all-reduce. An empty row is an error, unless `allow_empty`:
    then its mean is a zero vector and the caller keeps `empty_rows(counts)` beside it (the
    drivers' pooler does, so one failed rollout never stops a run)."""
    empty = empty_rows(counts)
    if bool(empty.any()):
        if not allow_empty:
            rows = torch.nonzero(empty).flatten()[:8].tolist()
            raise ValueError(
                f"empty response(s) at rows {rows}: zero response tokens to pool. "
                "Drop them before CLIPO or give them at least one token (e.g. EOS)."
            )
        return sums / counts.clamp_min(1).unsqueeze(-1)  # [B, D]: empty rows' sums are 0
    return sums / counts.unsqueeze(-1)


def masked_mean(
    hidden: torch.Tensor, mask: torch.Tensor, *, layout: Layout = "bsd"
) -> torch.Tensor:
    """Convenience: unsharded masked mean [B, D]."""
    return mean_from_sums(*masked_sum_and_count(hidden, mask, layout=layout))
