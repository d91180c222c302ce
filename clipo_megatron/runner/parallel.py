# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Model parallelism for the single-machine runner: process groups, vocab-parallel logprobs, grad norm.

    torchrun --nproc-per-node 3 -m clipo_megatron.cli train --config examples/configs/cpu_demo.yaml parallel.tp=3

Every rank holds a TP shard of the Megatron policy and runs the logprob pass and
the update; global rank 0 alone generates and verifies, and broadcasts the
rollouts and rewards. The CLIPO head is replicated (it is d x D, tiny; every
rank computes the same head step on the same pooled states), so contrastive
rewards and advantages are bit-identical on all ranks.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from clipo_megatron.megatron import parallel as mp
from clipo_megatron.runner.config import launch_problem


def init_distributed(tp: int = 1, pp: int = 1) -> None:
    """gloo process group (torchrun's env:// when launched by it, else a world of 1) + Megatron's groups."""
    from clipo_megatron.megatron.parallel import ensure_model_parallel
    from clipo_megatron.runner.model.cpu_shims import enable_cpu_shims

    if not dist.is_initialized():
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
            from clipo_megatron.runner.lifetime import die_with_parent

            die_with_parent()  # a rank outlives no torchrun agent (kill -9 included)
            dist.init_process_group("gloo", init_method="env://")
        else:  # a world of one: an in-memory store (no /tmp file to guess, race or leave behind)
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    problem = launch_problem(tp, pp, dist.get_world_size())
    if problem:
        raise ValueError(problem)
    if not torch.cuda.is_available():
        enable_cpu_shims()
    ensure_model_parallel(tp, pp)


def tp_group():
    return mp.tensor_parallel_group()


def pipeline_group():
    return mp.pipeline_group()


def is_pipeline_first_stage() -> bool:
    """This rank holds the embedding (the pipeline passes feed it the token ids)."""
    return mp.is_pipeline_first_stage()


def is_pipeline_last_stage() -> bool:
    """This rank holds the logits, the pooled states and the CLIPO head."""
    return mp.is_pipeline_last_stage()


def is_rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def broadcast_from_rank0(obj):
    """Rank 0's `obj` on every rank (pickled; rollouts and rewards are small)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return obj
    box = [obj if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def vocab_parallel_target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[..., V/tp] vocab-sharded logits, [...] targets -> [...] log p(target), differentiable."""
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    return -vocab_parallel_cross_entropy(logits.float().clone(), targets)


def clip_grad_norm_model_parallel(params, max_norm: float) -> torch.Tensor:
    """Global grad-norm clipping over TP shards and PP stages, as Megatron-Core's optimizer does.

    The gradients counted are Megatron-Core's own choice (`param_is_not_shared`: not the last
    stage's copy of a tied embedding; `param_is_not_tensor_parallel_duplicate`: a TP-replicated
    one on TP rank 0 only). The norm itself is summed here, in float64 on the host: Megatron-Core's
    `get_grad_norm_fp32` / `clip_grad_by_total_norm_fp32` allocate their buffers on "cuda", and the
    runner trains on CPU.
    """
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
    from megatron.core.transformer.module import param_is_not_shared

    params = [p for p in params if p.grad is not None]
    counted = [
        p for p in params if param_is_not_shared(p) and param_is_not_tensor_parallel_duplicate(p)
    ]
    sq = torch.zeros((), dtype=torch.float64)
    for p in counted:
        sq += (p.grad.double() ** 2).sum()
    dist.all_reduce(sq, group=mp.model_parallel_group())
    total = sq.sqrt().float()
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for p in params:
            p.grad.mul_(coef)
    return total


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
