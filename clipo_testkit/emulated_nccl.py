# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NCCL's rule under `emulated_cuda()`: collectives on a group declared NCCL take device tensors only.

The collectives run over gloo underneath (the tensors are host tensors in disguise); the guard
checks every tensor argument first and raises on a host one, naming the collective, the shape
and the dtype, as a real NCCL group would fail (or, worse, hang) on the GPU path.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.utils._pytree import tree_map

from clipo_testkit.emulated_tags import (
    EmulatedDeviceError,
    is_on_device,
    tensors_in,
    untag_if_tensor,
)

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "all_to_all_single",
    "send",
    "recv",
    "isend",
    "irecv",
)
P2P_OPS = ("isend", "irecv")  # also rebound in distributed_c10d, where P2POp looks them up


def nccl_guard(name: str, original: Callable, nccl: Callable[[Any], bool]) -> Callable:
    @functools.wraps(original)
    def guarded(*args, **kwargs):
        group = kwargs.get("group")
        if group is None and name not in ("send", "recv", "isend", "irecv"):
            group = next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
        if nccl(group):
            for t in tensors_in(args, kwargs):
                if not is_on_device(t):
                    raise EmulatedDeviceError(
                        f"torch.distributed.{name}: NCCL takes device tensors only, got a host "
                        f"tensor {tuple(t.shape)} {t.dtype} (emulated: the group is declared NCCL)"
                    )
        args = tree_map(untag_if_tensor, args)  # gloo underneath; buffers share storage
        kwargs = tree_map(untag_if_tensor, kwargs)
        if name in P2P_OPS:
            # torch's isend re-dispatches through the mode by its module-level name, which is
            # this guard (see P2P_OPS): the host tensors handed down are already checked
            with torch._C.DisableTorchFunction():
                return original(*args, **kwargs)
        return original(*args, **kwargs)

    return guarded


@contextlib.contextmanager
def nccl_guards(nccl: Callable[[Any], bool]) -> Iterator[None]:
    """Every collective of COLLECTIVES guarded for the block (`nccl`: is this group NCCL?).
    P2POp accepts only distributed_c10d's own isend / irecv (`op not in [isend, irecv]` over that
    module's names): the guarded ones are bound under those names too (pipeline parallel)."""
    saved = {n: getattr(dist, n) for n in COLLECTIVES if hasattr(dist, n)}
    guarded = {n: nccl_guard(n, f, nccl) for n, f in saved.items()}
    for n, g in guarded.items():
        setattr(dist, n, g)
    for n in P2P_OPS:
        setattr(c10d, n, guarded[n])
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(dist, n, f)
        for n in P2P_OPS:
            setattr(c10d, n, saved[n])
