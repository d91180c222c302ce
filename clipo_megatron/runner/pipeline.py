# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Pipeline stages of the single-machine runner: layer numbering, stage state, tied embeddings.

    torchrun --nproc-per-node 2 -m clipo_megatron.cli train --config ... parallel.pp=2

The schedule (Megatron-Core's `get_forward_backward_func`, 1F1B) and the broadcast of the
last stage's results are the layout's (`runner/layout.py`). With tied embeddings the last
stage's output-layer copy gets its gradient all-reduced with the first stage's embedding
(Megatron's embedding group), as `finalize_model_grads` does for DDP-wrapped models.
Checkpoints and the generator use full layer numbering: stage s holds layers
[s * L/pp, (s + 1) * L/pp).
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

from clipo_megatron.megatron import parallel as mp

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


def layer_offset(num_layers: int) -> int:
    pp = mp.pipeline_world_size()
    if num_layers % pp:
        raise ValueError(f"parallel.pp={pp} does not divide the model's num_layers={num_layers}")
    return mp.pipeline_rank() * (num_layers // pp)


def renumber(name: str, offset: int) -> str:
    """A stage-local `decoder.layers.i.` name -> the full model's `decoder.layers.(i + offset).`."""
    return _LAYER.sub(lambda m: f"decoder.layers.{int(m.group(1)) + offset}.", name)


def is_tied_copy(name: str, tied: bool) -> bool:
    """The last stage's copy of a tied embedding (not a tensor of its own in the full model)."""
    return tied and name == "output_layer.weight" and not mp.is_pipeline_first_stage()


def full_name_for(name: str, offset: int, tied: bool) -> str:
    return (
        "embedding.word_embeddings.weight" if is_tied_copy(name, tied) else renumber(name, offset)
    )


def gather_stages(local_full_named: dict) -> dict:
    """Merge every pipeline stage's {full name: value} (pickled over the PP group; small models only)."""
    if mp.pipeline_world_size() == 1:
        return local_full_named
    parts: list[dict] = [{} for _ in range(mp.pipeline_world_size())]
    dist.all_gather_object(parts, local_full_named, group=mp.pipeline_group())
    merged: dict = {}
    for p in parts:
        merged.update(p)
    return merged


def allreduce_tied_embedding_grads(model) -> None:
    """First stage's embedding and last stage's output-layer copy share one gradient (tied weights)."""
    if mp.pipeline_world_size() == 1 or not getattr(
        model, "share_embeddings_and_output_weights", False
    ):
        return
    group = mp.embedding_group()
    if group is not None:
        w = model.shared_embedding_or_output_weight()
        if w.grad is None:
            w.grad = torch.zeros_like(w)
        dist.all_reduce(w.grad, group=group)


def uniform_micro_batch(batch: int, wanted: int) -> int:
    """The largest micro-batch <= wanted that divides the batch (the schedule's p2p shapes are fixed)."""
    return max(d for d in range(1, min(batch, wanted) + 1) if batch % d == 0)


def local_from_full(names, full: dict, arch, shard_value=None) -> dict:
    """This rank's {local name: value} (its stage's layers, its TP shard) from a full (TP = PP = 1) dict.

    `names` are this rank's keys (a state dict's or the parameters'); those absent from `full` are
    left out, for the caller's strict loader to name. `shard_value(name, value, rank, size)` cuts one
    value (default: a tensor, `tp_state.shard`).
    """
    from clipo_megatron.runner.model.tp_state import shard

    shard_value = shard_value or shard
    offset, rank, size = (
        layer_offset(arch.num_layers),
        mp.tensor_parallel_rank(),
        mp.tensor_parallel_world_size(),
    )
    local = {}
    for k in names:
        full_name = full_name_for(k, offset, arch.tie_embeddings)
        if not k.endswith("_extra_state") and full_name in full:
            local[k] = shard_value(k, full[full_name], rank, size)
    return local


def full_from_local(named: dict, arch, tp_group, gather_value=None) -> dict:
    """{local name: value} of this rank -> {full name: full value}, merged over TP and PP (collective).

    `gather_value(name, value, tp_group)` reassembles one value (default: a tensor,
    `tp_state.gather_tensor`); every rank calls it for every name, in the same order.
    """
    from clipo_megatron.runner.model.tp_state import gather_tensor

    gather_value = gather_value or gather_tensor
    offset = layer_offset(arch.num_layers)
    local = {}
    for k, v in named.items():
        if k.endswith("_extra_state"):
            continue
        full = gather_value(k, v, tp_group)
        if not is_tied_copy(k, arch.tie_embeddings):
            local[renumber(k, offset)] = full
    return gather_stages(local)
