# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The inference engine's tensor- and expert-parallel followers, on CPU (test code).

NeMo-RL main's `MegatronGeneration.generate(_async)` calls worker 0 only: on a GPU the other ranks'
persistent Megatron-Core engines (started by `prepare_for_generation`) take part in every forward
from their engine loops. The CPU sampler stands in for the engine, so under TP > 1 the other ranks
of worker 0's TP group (and, for an MoE model, of its EP group) need the same: `prepare_for_generation` starts a follower thread there that
runs each forward the leader announces (the token ids, broadcast over a gloo group of their own),
and `finish_generation` stops it. Only rank 0 samples; the followers only join the TP / EP collectives
of the same forward (`policy_passes.forward_logits`, the vocab-parallel logits gathered).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.distributed as dist

_STOP, _FORWARD = 0, 1


class TPGenerationFollowers:
    """Made in every rank's `__init__` (the groups are created collectively); a no-op where worker
    0's forward involves no other rank. The followers are the ranks of worker 0's tensor-parallel
    group and, for an MoE model, of its expert-parallel and expert-tensor-parallel groups: the
    token dispatcher's all-to-all over the EP group needs every EP rank in the same forward."""

    def __init__(self) -> None:
        from megatron.core import parallel_state as ps

        self.group, self.leading, self.member = None, False, False
        self.thread: threading.Thread | None = None
        if ps.get_pipeline_model_parallel_world_size() > 1:
            return  # the CPU sampler runs TP / EP only: generate() refuses PP itself
        mine = set(dist.get_process_group_ranks(ps.get_tensor_model_parallel_group()))
        for name in ("get_expert_model_parallel_group", "get_expert_tensor_parallel_group"):
            group = getattr(ps, name, lambda **_: None)(check_initialized=False)
            if group is not None:
                mine |= set(dist.get_process_group_ranks(group))
        world = dist.new_group(backend="gloo")  # every rank calls it (the default may be NCCL)
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, sorted(mine), group=world)
        reached, grown = {0}, True  # the ranks worker 0's forward reaches, transitively
        while grown:  # (ETP 2 x EP 2: rank 1 joins by TP, rank 3 by rank 1's EP group)
            more = reached.union(*(every[r] for r in reached))
            grown, reached = more != reached, more
        if len(reached) == 1:
            return
        leader_group = sorted(reached)
        self.group = dist.new_group(ranks=leader_group, backend="gloo")  # every rank calls it
        self.member = dist.get_rank() in leader_group

    @property
    def active(self) -> bool:
        return self.group is not None and self.member

    def start(self, model_fn) -> None:
        """prepare_for_generation: the leader announces forwards; the followers start serving."""
        if not self.active:
            return
        if dist.get_rank() == 0:
            self.leading = True
        elif self.thread is None:
            self.thread = threading.Thread(target=self._follow, args=(model_fn,), daemon=True)
            self.thread.start()

    def stop(self) -> None:
        """finish_generation: the leader tells the followers to stop; they return."""
        if not self.active:
            return
        if dist.get_rank() == 0:
            if self.leading:
                dist.broadcast(torch.tensor([_STOP, 0, 0]), src=0, group=self.group)
            self.leading = False
        elif self.thread is not None:
            self.thread.join()
            self.thread = None

    def leader_model(self, model: Any) -> Any:
        """The model the leader's sampler calls: each forward announced to the followers first."""
        if not (self.active and self.leading):
            return model

        return _Announced(model, self.group)

    def _follow(self, model_fn) -> None:
        from clipo_megatron.runner.model.cpu_shims import _CudaToCpu
        from clipo_megatron.runner.model.policy_passes import forward_logits

        with torch.no_grad(), _CudaToCpu():  # function modes and grad mode are per thread
            while True:
                head = torch.zeros(3, dtype=torch.long)
                dist.broadcast(head, src=0, group=self.group)
                if int(head[0]) == _STOP:
                    return
                ids = torch.zeros(int(head[1]), int(head[2]), dtype=torch.long)
                dist.broadcast(ids, src=0, group=self.group)
                forward_logits(model_fn(), ids)


class _Announced:
    """The leader's model: each forward's token ids broadcast to the followers before it runs."""

    def __init__(self, model: Any, group) -> None:
        self.model, self.group = model, group

    def eval(self) -> _Announced:
        self.model.eval()
        return self

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s = ids.shape
        dist.broadcast(torch.tensor([_FORWARD, b, s]), src=0, group=self.group)
        dist.broadcast(ids.contiguous(), src=0, group=self.group)
        return self.model(ids, pos, mask)
