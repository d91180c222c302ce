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


def broadcast_from_last_stage(
    t: torch.Tensor | None, shape, dtype, *, pp_group=None, device=None
) -> torch.Tensor:
    """Pipeline parallel: the last stage computed `t`; every stage returns it.

    Non-last stages pass t=None and the expected shape/dtype (their local batch) and the
    device of the rows (the receive buffer's: NCCL takes device tensors only).
    """
    if group_size(pp_group) == 1:
        assert t is not None, "a pipeline of one stage is the last stage: it passes t"
        return t
    ranks = dist.get_process_group_ranks(pp_group)
    buf = t.contiguous() if t is not None else torch.empty(shape, dtype=dtype, device=device)
    dist.broadcast(buf, src=ranks[-1], group=pp_group)
    return buf
