# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Process groups for CLIPO, read from Megatron's `parallel_state` in this one place.

Every collective in `clipo_megatron.megatron` takes its groups as keyword
arguments; `ParallelGroups.from_parallel_state()` is the single bootstrap
that reads megatron's globals, so tests can hand in gloo groups instead.
A group of None means "not parallel along this dimension".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist


def group_size(group) -> int:
    """Size of a process group; None (or no distributed init) counts as 1."""
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def group_rank(group) -> int:
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 0
    return dist.get_rank(group)


@dataclass
class ParallelGroups:
    """The groups CLIPO communicates over, plus the sequence-parallel flag."""

    tp: object = None
    cp: object = None
    dp: object = None
    pp: object = None
    sequence_parallel: bool = False

    @classmethod
    def from_parallel_state(cls, sequence_parallel: bool = False) -> ParallelGroups:
        from megatron.core import parallel_state as ps

        return cls(
            tp=ps.get_tensor_model_parallel_group(),
            cp=ps.get_context_parallel_group(),
            dp=ps.get_data_parallel_group(),
            pp=ps.get_pipeline_model_parallel_group(),
            sequence_parallel=sequence_parallel,
        )
