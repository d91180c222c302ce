# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Data-parallel gathering of CLIPO inputs, and the pipeline broadcast of its outputs.

The rollouts of one prompt can sit on different DP ranks (and packing
reorders them), so every rank gathers all embeddings to see complete groups.
The gather carries gradients: each rank's loss sums its own anchors over the
whole-batch anchor count, so the loss summed over ranks is the single-process
loss; backward all-reduces the gathered gradient and keeps this rank's rows,
and the head's parameter gradients are then summed over DP. Ranks may hold
different numbers of rollouts (ragged after dynamic sampling).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from clipo_megatron.megatron.parallel import group_rank, group_size


def _sizes(n: int, group, device: torch.device) -> list[int]:
    """Every rank's row count; the buffers live on `device` (NCCL groups take device tensors only)."""
    t = torch.tensor([n], dtype=torch.long, device=device)
    out = [torch.zeros_like(t) for _ in range(group_size(group))]
    dist.all_gather(out, t, group=group)
    return [int(x) for x in out]


def _gather_padded(x: torch.Tensor, sizes: list[int], group) -> torch.Tensor:
    m = max(sizes)
    pad = torch.zeros((m - x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
    buf = torch.cat([x.contiguous(), pad]) if m > x.shape[0] else x.contiguous()
    out = [torch.empty_like(buf) for _ in sizes]
    dist.all_gather(out, buf, group=group)
    return torch.cat([o[:n] for o, n in zip(out, sizes)])


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, sizes):
        ctx.group, ctx.sizes = group, sizes
        return _gather_padded(x, sizes, group)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)  # every rank's loss touches every row
        r = group_rank(ctx.group)
        start = sum(ctx.sizes[:r])
        return grad[start : start + ctx.sizes[r]], None, None


def gather_rows(x: torch.Tensor, *, dp_group=None) -> tuple[torch.Tensor, slice]:
    """Concatenate rows of all DP ranks (rank order); returns (all rows, this rank's slice).

    Differentiable when `x` requires grad. Identity for a DP group of size 1.
    """
    if group_size(dp_group) == 1:
        return x, slice(0, x.shape[0])
    sizes = _sizes(x.shape[0], dp_group, x.device)
    r = group_rank(dp_group)
    mine = slice(sum(sizes[:r]), sum(sizes[: r + 1]))
    if x.requires_grad:
        return _GatherWithGrad.apply(x, dp_group, sizes), mine
    return _gather_padded(x, sizes, dp_group), mine


def all_reduce_grads(module: torch.nn.Module, *, dp_group=None) -> None:
    """Sum parameter gradients over DP (the per-rank losses add up to the full loss)."""
    if group_size(dp_group) == 1:
        return
    for p in module.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=dp_group)


def broadcast_from_last_stage(value, *, pp_group=None, shape=None, dtype=None, device=None):
    """The last pipeline stage's `value` on every stage of `pp_group` (the one pipeline broadcast).

    Two forms, picked by the arguments every stage passes alike:
    - tensor (`shape` and `dtype` given): one `dist.broadcast`, no pickling; the other stages
      pass value=None and get a buffer made on `device`;
    - object (no `shape`): any picklable value (dicts of metrics, tuples of tensors), through
      `broadcast_object_list`, whose byte buffers live on `device`.
    `device` is where the rows live: NCCL groups take device tensors only. A group of one stage
    (or None) returns `value` untouched.
    """
    if group_size(pp_group) == 1:
        return value
    src = dist.get_process_group_ranks(pp_group)[-1]
    if shape is not None:
        buf = (
            value.contiguous()
            if value is not None
            else torch.empty(shape, dtype=dtype, device=device)
        )
        dist.broadcast(buf, src=src, group=pp_group)
        return buf
    box = [value]
    dist.broadcast_object_list(box, src=src, group=pp_group, device=device)
    return box[0]
