# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Mean pooling of response hidden states when tokens are sharded (SP, CP, THD).

Rule: each rank sums the response tokens it holds, then the
partial sums [B, D] are all-reduced over the groups that split the sequence
(TP when sequence parallel, CP) — D floats per sequence, never a gather of
[S, B, D]. Token counts come from the full response mask every rank already
has, so they need no communication. Hidden states are constants for CLIPO
(the head learns, the policy does not from this loss), so pooling runs
without autograd.

Layouts handled:
- padded [S, B, D] (Megatron's sbd), SP: rank r of TP holds positions
  [r * S/tp, (r+1) * S/tp);
- CP with NeMo-RL's load-balanced split: the sequence is cut into 2*cp
  chunks and rank r holds chunks r and 2*cp-1-r (in that order);
- packed THD [T, 1, D] with `cu_seqlens_padded`: the same 2*cp chunking per
  sequence, then SP splits the local token stream across TP.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from clipo_megatron.megatron.parallel import group_rank, group_size
from clipo_megatron.megatron.pooling.masked_mean import mean_from_sums, segment_sum_and_count


def cp_chunk_positions(seq_len: int, cp_size: int, cp_rank: int) -> torch.Tensor:
    """Positions of one sequence held by `cp_rank` under the load-balanced 2*cp split."""
    if cp_size == 1:
        return torch.arange(seq_len)
    if seq_len % (2 * cp_size):
        raise ValueError(f"sequence length {seq_len} must be divisible by 2*cp={2 * cp_size}")
    c = seq_len // (2 * cp_size)
    first = torch.arange(cp_rank * c, (cp_rank + 1) * c)
    second = torch.arange((2 * cp_size - 1 - cp_rank) * c, (2 * cp_size - cp_rank) * c)
    return torch.cat([first, second])


def _sp_slice(n: int, tp_size: int, tp_rank: int) -> slice:
    if n % tp_size:
        raise ValueError(
            f"local sequence length {n} must be divisible by tp={tp_size} for sequence parallel"
        )
    step = n // tp_size
    return slice(tp_rank * step, (tp_rank + 1) * step)


def padded_local_segment_ids(
    response_mask: torch.Tensor,
    *,
    cp_size: int = 1,
    cp_rank: int = 0,
    sp_size: int = 1,
    sp_rank: int = 0,
) -> torch.Tensor:
    """[S_local * B] sequence index of each local token of an sbd tensor (-1 = not response)."""
    b, s = response_mask.shape
    seg = torch.arange(b).unsqueeze(1).expand(b, s)  # [B, S]
    seg = torch.where(response_mask.bool(), seg, torch.full_like(seg, -1))
    return local_segment_ids(
        seg, cp_size=cp_size, cp_rank=cp_rank, sp_size=sp_size, sp_rank=sp_rank
    )


def local_segment_ids(
    segments: torch.Tensor,
    *,
    cp_size: int = 1,
    cp_rank: int = 0,
    sp_size: int = 1,
    sp_rank: int = 0,
) -> torch.Tensor:
    """[S_local * R] this rank's part of a [R, S] segment-id matrix (-1 = not pooled), sbd order.

    A row may hold several sequences (shared-prefix packing: one prompt, G responses).
    """
    r, s = segments.shape
    pos = cp_chunk_positions(s, cp_size, cp_rank)[
        _sp_slice(s // cp_size, sp_size, sp_rank)
    ]  # [S_local]
    return segments[:, pos].transpose(0, 1).reshape(-1)  # sbd order: [S_local, R] flattened


def packed_local_segment_ids(
    cu_seqlens_padded: torch.Tensor,
    token_mask: torch.Tensor,
    *,
    cp_size: int = 1,
    cp_rank: int = 0,
    sp_size: int = 1,
    sp_rank: int = 0,
) -> torch.Tensor:
    """[T_local] sequence index of each local packed token (-1 = not response / padding).

    token_mask: [T] response mask over the full packed (padded) stream.
    """
    bounds = cu_seqlens_padded.tolist()
    if token_mask.shape[0] != bounds[-1]:
        raise ValueError(
            f"token_mask has {token_mask.shape[0]} tokens, cu_seqlens_padded ends at {bounds[-1]}"
        )
    segs = []
    for i, (a, e) in enumerate(zip(bounds[:-1], bounds[1:])):
        pos = cp_chunk_positions(e - a, cp_size, cp_rank) + a
        seg = torch.full((pos.numel(),), i, dtype=torch.long)
        segs.append(torch.where(token_mask[pos].bool(), seg, torch.full_like(seg, -1)))
    stream = torch.cat(segs)  # [T / cp]
    return stream[_sp_slice(stream.numel(), sp_size, sp_rank)]


@torch.no_grad()
def sharded_response_sums(
    hidden_local: torch.Tensor,
    segment_ids: torch.Tensor,
    num_seqs: int,
    *,
    tp_group=None,
    cp_group=None,
    sequence_parallel: bool = False,
) -> torch.Tensor:
    """[B, D] fp32 sums of response hidden states over all shards of the sequence.

    hidden_local: this rank's final hidden states, [S_local, B, D] or [T_local, 1, D].
    segment_ids: [S_local * B] or [T_local], from the two functions above.
    """
    flat = hidden_local.reshape(-1, hidden_local.shape[-1])  # [S_local * B, D]
    sums, _ = segment_sum_and_count(flat, segment_ids, num_seqs)  # [B, D]
    if sequence_parallel and group_size(tp_group) > 1:
        dist.all_reduce(sums, group=tp_group)
    if group_size(cp_group) > 1:
        dist.all_reduce(sums, group=cp_group)
    return sums


def sharded_response_mean(
    hidden_local: torch.Tensor,
    segment_ids: torch.Tensor,
    counts: torch.Tensor,
    *,
    tp_group=None,
    cp_group=None,
    sequence_parallel: bool = False,
    allow_empty: bool = False,
) -> torch.Tensor:
    """[B, D] mean response hidden state; counts [B] from the full response mask. `allow_empty`:
    a row with count 0 pools to zeros (`megatron.pooling.masked_mean.mean_from_sums`) instead of raising."""
    sums = sharded_response_sums(
        hidden_local,
        segment_ids,
        counts.numel(),
        tp_group=tp_group,
        cp_group=cp_group,
        sequence_parallel=sequence_parallel,
    )
    return mean_from_sums(sums, counts.float(), allow_empty=allow_empty)


def local_rank_info(tp_group=None, cp_group=None, sequence_parallel: bool = False) -> dict:
    """The (size, rank) arguments of the segment-id functions for this process."""
    return dict(
        cp_size=group_size(cp_group),
        cp_rank=group_rank(cp_group),
        sp_size=group_size(tp_group) if sequence_parallel else 1,
        sp_rank=group_rank(tp_group) if sequence_parallel else 0,
    )
