# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Pooling response hidden states inside a microbatched logprob pass (one forward, no second pass).

Used by every driver's logprob pass: NeMo-RL's GPU Megatron worker and the
CPU policy worker (through `nemo_rl.worker.ClipoWorkerMixin`) and the
single-machine runner (`runner/train.py`). The pass reads its microbatches
from an iterator; `MicrobatchPooler.tee` remembers each microbatch's rows
(`clipo_sample_idx`), response mask and packing layout, and a forward hook on
the final norm (last pipeline stage) pools the hidden states of the
microbatch being run:

    padded: hidden [S(/TP with SP), b, H]   packed: hidden [T(/CP)(/TP with SP), 1, H]

into per-row fp32 means [b, H] with `megatron.pooling.sharded` (partial sums
all-reduced over TP-with-SP and CP; D floats per row). Devices: the index
arithmetic (masks, packing offsets, segment ids) runs on the host from one
small copy of the microbatch's metadata, whichever device it arrives on
(NeMo-RL moves the microbatch to the GPU); segment ids and counts then move
to the hidden states' device, and the pooled means *and their row ids* live
there (`result()`), so the head step never mixes devices. Forward-only
schedules run microbatches in iterator order, so the k-th hook call is the
k-th microbatch.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from clipo_megatron.megatron.pooling.final_norm import (  # re-exported: the pass's vocabulary
    FinalNormNotFound,
    find_final_norm,
    require_final_norm,
)

__all__ = [
    "SAMPLE_IDX_KEY",
    "SEGMENTS_KEY",
    "FinalNormNotFound",
    "MicrobatchPooler",
    "find_final_norm",
    "packed_response_mask",
    "require_final_norm",
]

SAMPLE_IDX_KEY = "clipo_sample_idx"
# Shared-prefix rows (`runner/model/shared_prefix.py`): [R, T] local sample index at each response
# token, -1 elsewhere; one padded row holds several samples, so a per-row mask cannot say it.
SEGMENTS_KEY = "clipo_segments"


def _get(mb: Any, key: str):
    if isinstance(mb, dict):
        return mb.get(key)
    return getattr(mb, key, None)


def packed_response_mask(
    token_mask: torch.Tensor,
    input_lengths: torch.Tensor,
    cu_seqlens_padded: torch.Tensor,
    total_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lay per-row response masks [b, S] into the packed stream; returns (stream mask [T], cu [b+1 or b+2]).

    Row i occupies [cu[i], cu[i] + len_i) (NeMo-RL packs right-padded rows
    in order and pads each to cu[i+1] - cu[i]). `total_len` > cu[-1] (PP's
    pad-to-full length) adds one trailing all-padding segment.
    """
    cu = cu_seqlens_padded.long().cpu()
    b = token_mask.shape[0]
    if cu.numel() != b + 1:
        raise ValueError(
            f"cu_seqlens_padded has {cu.numel()} entries for {b} rows (expected b + 1)"
        )
    stream = torch.zeros(int(cu[-1]), dtype=torch.bool)
    tm = token_mask.bool().cpu()
    for i in range(b):
        n = int(input_lengths[i])
        if n > int(cu[i + 1] - cu[i]):
            raise ValueError(
                f"row {i}: length {n} exceeds its packed slot {int(cu[i + 1] - cu[i])}"
            )
        stream[int(cu[i]) : int(cu[i]) + n] = tm[i, :n]
    if total_len is not None and total_len > int(cu[-1]):
        stream = torch.cat([stream, torch.zeros(total_len - int(cu[-1]), dtype=torch.bool)])
        cu = torch.cat([cu, torch.tensor([total_len])])
    return stream, cu


class MicrobatchPooler:
    """Tee of the microbatch iterator + final-norm hook -> per-row pooled means."""

    def __init__(
        self,
        *,
        tp_group=None,
        cp_group=None,
        sequence_parallel: bool = False,
        response_key: str = "token_mask",
        pool_last_token: bool = True,
    ):
        self.tp_group = tp_group
        self.cp_group = cp_group
        self.sequence_parallel = sequence_parallel
        self.response_key = response_key
        # False: the authors' positions y1..y(T-1) (megatron/pooling/positions.py)
        self.pool_last_token = pool_last_token
        self.pending: deque = deque()
        self.rows: list[torch.Tensor] = []
        self.pooled: list[torch.Tensor] = []
        self.empty_masks: list[torch.Tensor] = []  # [b] bool per microbatch: nothing to pool

    def tee(self, iterator: Iterable) -> Iterator:
        for mb in iterator:
            data = _get(mb, "data_dict")
            data = mb if data is None else data
            if SAMPLE_IDX_KEY not in data:
                raise ValueError(
                    f"microbatch has no {SAMPLE_IDX_KEY!r}: the CLIPO policy attaches it to the "
                    "logprob data; was get_logprobs called through ClipoPolicy?"
                )
            segments = data.get(SEGMENTS_KEY) if isinstance(data, dict) else None
            mask = None if segments is not None else torch.as_tensor(data[self.response_key])
            if not self.pool_last_token:
                from clipo_megatron.megatron.pooling.positions import (
                    segments_without_last_token,
                    without_last_token,
                )

                if mask is None:
                    segments = segments_without_last_token(torch.as_tensor(segments).cpu())
                else:
                    mask = without_last_token(mask.cpu())
            self.pending.append(
                {
                    "rows": torch.as_tensor(data[SAMPLE_IDX_KEY]).long(),
                    "segments": segments,
                    "mask": mask,
                    "lengths": torch.as_tensor(data["input_lengths"])
                    if "input_lengths" in data
                    else None,
                    "cu": _get(mb, "cu_seqlens_padded"),
                }
            )
            yield mb

    def pool(self, hidden: torch.Tensor) -> None:
        """Pool one microbatch's final hidden states (called from the final-norm hook)."""
        from clipo_megatron.megatron.pooling.sharded import (
            local_rank_info,
            local_segment_ids,
            packed_local_segment_ids,
            padded_local_segment_ids,
        )

        if not self.pending:
            raise RuntimeError(
                "final-norm hook fired with no pending microbatch (iterator/forward out of step)"
            )
        meta = self.pending.popleft()
        info = local_rank_info(self.tp_group, self.cp_group, self.sequence_parallel)
        shard = info["cp_size"] * info["sp_size"]
        if meta["segments"] is not None:  # shared-prefix rows: hidden [T_local, R, H]
            segments = meta["segments"].long().cpu()  # [R, T]
            b = meta["rows"].numel()
            segments = torch.nn.functional.pad(
                segments, (0, hidden.shape[0] * shard - segments.shape[1]), value=-1
            )
            seg = local_segment_ids(segments, **info)  # [T_local * R]
            counts = torch.bincount(segments[segments >= 0], minlength=b)  # [b]
            self._store(meta, hidden, seg, counts)
            return
        mask = meta["mask"].bool().cpu()  # [b, S]
        b = mask.shape[0]
        if meta["cu"] is not None:  # packed THD: hidden [T_local, 1, H]
            total = hidden.shape[0] * shard
            stream, cu = packed_response_mask(mask, meta["lengths"], meta["cu"], total)
            seg = packed_local_segment_ids(cu, stream, **info)  # [T_local], trailing pad -> -1
            seg = torch.where(seg >= b, torch.full_like(seg, -1), seg)
            counts = torch.stack(
                [stream[int(cu[i]) : int(cu[i + 1])].sum() for i in range(b)]
            )  # [b]
        else:  # padded sbd: hidden [S_local, b, H]
            s_full = hidden.shape[0] * shard
            if mask.shape[1] > s_full:
                raise ValueError(
                    f"response mask has {mask.shape[1]} positions, hidden states cover {s_full}"
                )
            mask = torch.nn.functional.pad(mask, (0, s_full - mask.shape[1]))  # [b, S_full]
            seg = padded_local_segment_ids(mask, **info)  # [S_local * b]
            counts = mask.sum(1)  # [b]
        self._store(meta, hidden, seg, counts)

    def _store(self, meta: dict, hidden: torch.Tensor, seg: torch.Tensor, counts: torch.Tensor):
        """A row with no token to pool (a failed generation's empty response, a one-token answer
        without its last token) pools to zeros and is marked empty: the head step leaves it out
        of the contrastive set, so one rollout never stops the run."""
        from clipo_megatron.megatron.pooling.masked_mean import empty_rows
        from clipo_megatron.megatron.pooling.sharded import sharded_response_mean

        pooled = sharded_response_mean(
            hidden.detach().float(),
            seg.to(hidden.device),
            counts.to(hidden.device),
            tp_group=self.tp_group,
            cp_group=self.cp_group,
            sequence_parallel=self.sequence_parallel,
            allow_empty=True,
        )  # [b, H]
        self.rows.append(meta["rows"].to(hidden.device))  # rows live with their pooled states
        self.pooled.append(pooled)
        self.empty_masks.append(empty_rows(counts).to(hidden.device))  # [b]

    @contextlib.contextmanager
    def hooked(self, final_norm: torch.nn.Module | None):
        """Hook `final_norm` (None on non-last pipeline stages: nothing to pool there)."""
        if final_norm is None:
            yield self
            return
        handle = final_norm.register_forward_hook(
            lambda _m, _i, out: self.pool(out[0] if isinstance(out, tuple) else out)
        )
        try:
            yield self
        finally:
            handle.remove()

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pending:
            raise RuntimeError(
                f"{len(self.pending)} microbatches were read but never reached the final norm"
            )
        if not self.rows:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, 0)
        return torch.cat(self.rows), torch.cat(self.pooled)

    def empty_rows(self) -> torch.Tensor:
        """[b] bool in `result()`'s row order: rows with no token pooled (left out of CLIPO's
        contrastive set by the head step)."""
        if not self.empty_masks:
            return torch.zeros(0, dtype=torch.bool)
        return torch.cat(self.empty_masks)
