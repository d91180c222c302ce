# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What the checks read from a CLIPO worker, added by subclassing the product's worker (the product
holds no method only tests call). `InspectionMixin` goes first in the bases of a test worker:
the CPU stand-in (`real_worker/ray_worker.py`, `real_worker/build.py`) and, on GPUs, the product's
Ray actor (`gpu_worker.py`, handed to NeMo-RL by its `worker_extension_cls_fqn`)."""

from __future__ import annotations

from typing import Any

import torch

# By name only: gpu_worker imports NeMo-RL's worker, which only the worker's venv holds.
INSPECTED_GPU_WORKER_FQN = "clipo_testkit.nemo_rl.gpu_worker.InspectedClipoMegatronPolicyWorker"


def _host_copy(t: Any) -> Any:
    """A tensor's host copy (`.cpu()` returns a host tensor itself); any other value as it is."""
    return t.detach().to("cpu", copy=True) if isinstance(t, torch.Tensor) else t


def head_state(worker: Any) -> Any:
    """A `ClipoWorkerMixin` worker's ClipoWorkerState (the head, its trainer, the rows its last
    logprob pass pooled); None with CLIPO off or off the last pipeline stage."""
    return None if worker._clipo is None else worker._clipo.head_state


class InspectionMixin:
    """`clipo_head_state` and `clipo_last_pooled` over a `ClipoWorkerMixin` worker."""

    _clipo: Any
    _clipo_last_pooled: tuple[torch.Tensor, torch.Tensor] | None = None

    def clipo_head_step(self, **kwargs: Any) -> dict[str, Any]:
        """The product's head step; the rows and pooled states it consumes are kept first."""
        head = head_state(self)
        if head is not None and head.pooled is not None:
            self._clipo_last_pooled = (head.rows, head.pooled)
        return super().clipo_head_step(**kwargs)  # type: ignore[misc]

    def clipo_head_state(self) -> dict:
        """The head trainer's state (head, AdamW, steps) as host copies; {} off the last stage.
        Ray hands it to a driver that may hold no GPU. Copies, also on a host head (where `.cpu()`
        returns the live tensor): a state read before a head step stays as it was."""
        from torch.utils._pytree import tree_map

        head = head_state(self)
        if head is None:
            return {}
        return tree_map(_host_copy, head.trainer.state_dict())

    def clipo_last_pooled(self) -> dict:
        """{rows [b], pooled [b, H]} the last head step used; {} off the last stage."""
        if head_state(self) is None or self._clipo_last_pooled is None:
            return {}
        rows, pooled = self._clipo_last_pooled
        return {"rows": rows.cpu(), "pooled": pooled.detach().float().cpu()}
