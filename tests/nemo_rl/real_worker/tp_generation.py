# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The inference engine's tensor-parallel followers, on CPU (test code).

NeMo-RL main's `MegatronGeneration.generate(_async)` calls worker 0 only: on a GPU the other ranks'
persistent Megatron-Core engines (started by `prepare_for_generation`) take part in every forward
from their engine loops. The CPU sampler stands in for the engine, so under TP > 1 the other ranks
of worker 0's TP group need the same: `prepare_for_generation` starts a follower thread there that
runs each forward the leader announces (the token ids, broadcast over a gloo group of their own),
and `finish_generation` stops it. Only rank 0 samples; the followers only join the TP collectives
of the same forward (`policy_passes.forward_logits`, the vocab-parallel logits gathered).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.distributed as dist

_STOP, _FORWARD = 0, 1


class TPGenerationFollowers:
    """Made in every rank's `__init__` (the group is created collectively); a no-op at TP 1."""

    def __init__(self) -> None:
        from megatron.core import parallel_state

        self.tp = parallel_state.get_tensor_model_parallel_world_size()
        self.group, self.thread, self.leading = None, None, False
        if self.tp == 1:
            return
        if parallel_state.get_pipeline_model_parallel_world_size() > 1:
            self.tp = 1  # the CPU sampler runs TP only: generate() refuses PP itself
            return
        leader_group = list(range(self.tp))  # worker 0's TP group (TP is Megatron's fastest axis)
        self.group = dist.new_group(ranks=leader_group, backend="gloo")  # every rank calls it
        mine = dist.get_process_group_ranks(parallel_state.get_tensor_model_parallel_group())
        self.member = dist.get_rank() in leader_group
        assert not self.member or mine == leader_group, (mine, leader_group)

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
        from clipo_megatron.megatron.cpu_shims import _CudaToCpu
        from clipo_megatron.megatron.policy_passes import forward_logits

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
