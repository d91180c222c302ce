# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which response positions the capture pools: every one (y1..yT), or all but the last.

The authors' SGLang patch sums the final hidden state of each decode step and divides by the
number of output tokens. A decode step's input is the token sampled before it, and the request
ends as soon as y_T is sampled, so their sum holds the states at y1..y(T-1): the state at y_T
(input of no step) is never computed. `clipo.pool_last_token: false` pools those positions here.
Their divisor T instead of T - 1 only scales the vector, which the bias-free head and the
normalisation after it (megatron/head.py, theirs alike) do not see.
"""

from __future__ import annotations

import torch


def without_last_token(mask: torch.Tensor) -> torch.Tensor:
    """[b, S] response mask with each row's last response position cleared."""
    out = mask.bool().clone()
    pos = torch.arange(out.shape[1], device=out.device).expand_as(out)
    last = torch.where(out, pos, torch.full_like(pos, -1)).amax(dim=1)  # [b], -1: empty row
    rows = torch.nonzero(last >= 0).squeeze(1)
    out[rows, last[rows]] = False
    return out


def segments_without_last_token(segments: torch.Tensor) -> torch.Tensor:
    """[R, T] sample id per response position (-1 elsewhere, `runner/model/shared_prefix.py`) with
    each sample's last position set to -1 (a sample's tokens lie in one row, in order)."""
    out = segments.clone()
    flat = out.reshape(-1)  # a view: row-major, so a later position has a larger index
    ids = flat[flat >= 0].unique()
    for i in ids.tolist():
        flat[int(torch.nonzero(flat == i).max())] = -1
    return out
