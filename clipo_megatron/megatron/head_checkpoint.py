# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The contrastive head's checkpoint in one layout-independent form: the full (TP = 1) head.

A TP-sharded head (`ContrastiveHead` over a ColumnParallelLinear) holds [d / tp, D] of W on
each TP rank, and AdamW's moments of W have the same shard shape. Saved per rank, a run could
only resume at the TP it was saved at. Here every TP rank joins one all-gather per sharded
tensor and one writer saves the full head with its full moments; a resume at any TP takes its
rank's slice of them (`tensor_model_parallel` / `partition_dim`, the attributes Megatron-Core's
parallel linears set, say which tensors are sharded and along which dim). PP, CP and DP do not
shard the head (it lives on the last stage, replicated over CP / DP), so a full file serves
every layout. The AdamW step counts and hyper-parameters are per tensor and unsharded.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from clipo_megatron.megatron.parallel import group_rank, group_size

_EXTRA = "_extra_state"  # a module's own metadata, not part of the head's math


def _partition_dim(param: torch.Tensor) -> int | None:
    """The dim a parameter is TP-sharded along, or None when every TP rank holds all of it."""
    if getattr(param, "tensor_model_parallel", False):
        return int(getattr(param, "partition_dim", 0))
    return None


def _sharded(head: torch.nn.Module) -> dict[str, int]:
    return {n: d for n, p in head.named_parameters() if (d := _partition_dim(p)) is not None}


def _gather(local: torch.Tensor, dim: int, tp_group) -> torch.Tensor:
    size = group_size(tp_group)
    local = local.detach().contiguous()
    if size == 1:
        return local.cpu().clone()
    pieces = [torch.empty_like(local) for _ in range(size)]
    dist.all_gather(pieces, local, group=tp_group)
    return torch.cat([p.cpu() for p in pieces], dim)  # [.. full ..]


def _slice(full: torch.Tensor, dim: int, tp_group) -> torch.Tensor:
    size = group_size(tp_group)
    if full.shape[dim] % size:
        raise ValueError(
            f"a saved head tensor of {full.shape[dim]} rows along dim {dim} cannot be split over "
            f"TP = {size}: choose clipo.method.embed_dim divisible by the TP size"
        )
    return full.chunk(size, dim=dim)[group_rank(tp_group)].clone()


def full_trainer_state(trainer, tp_group=None) -> dict:
    """HeadTrainer's state with every TP-sharded tensor gathered to its full shape (host tensors).

    A collective: every rank of `tp_group` calls it; each gets the same full state."""
    head, opt = trainer.head, trainer.optimizer
    names = [n for n, _ in head.named_parameters()]
    sharded = _sharded(head)
    weights = {
        k: (_gather(v, sharded[k], tp_group) if k in sharded else v.detach().cpu().clone())
        for k, v in head.state_dict().items()
        if not k.endswith(_EXTRA)  # Megatron's linears add one (None); nn.Linear has none
    }
    optim = opt.state_dict()
    state = {}
    for idx, per_param in optim["state"].items():
        dim = sharded.get(names[idx])
        state[idx] = {
            k: (
                _gather(v, dim, tp_group)
                if dim is not None and isinstance(v, torch.Tensor) and v.dim() > 0
                else (v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v)
            )
            for k, v in per_param.items()
        }
    return {
        "head": weights,
        "optimizer": {"state": state, "param_groups": optim["param_groups"]},
        "steps_done": trainer.steps_done,
    }


def load_full_trainer_state(trainer, full: dict, tp_group=None) -> None:
    """Load a full (`full_trainer_state`) state into a head of this rank's TP shard shape."""
    head = trainer.head
    names = [n for n, _ in head.named_parameters()]
    sharded = _sharded(head)
    weights = {
        k: (_slice(v, sharded[k], tp_group) if k in sharded else v)
        for k, v in full["head"].items()
        if not k.endswith(_EXTRA)
    }
    weights.update({k: v for k, v in head.state_dict().items() if k.endswith(_EXTRA)})
    state = {}
    for idx, per_param in full["optimizer"]["state"].items():
        dim = sharded.get(names[int(idx)])
        state[int(idx)] = {
            k: (
                _slice(v, dim, tp_group)
                if dim is not None and isinstance(v, torch.Tensor) and v.dim() > 0
                else v
            )
            for k, v in per_param.items()
        }
    trainer.load_state_dict(
        {
            "head": weights,
            "optimizer": {"state": state, "param_groups": full["optimizer"]["param_groups"]},
            "steps_done": full["steps_done"],
        }
    )
