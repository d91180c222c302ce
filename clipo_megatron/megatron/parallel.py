# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Process groups and stage facts, read from Megatron's `parallel_state` in this one place.

Megatron-Core keeps its model-parallel groups in a module-global
(`megatron.core.parallel_state`); its newer style passes the groups in
(ProcessGroupCollection). CLIPO does the same: every collective in
`clipo_megatron.megatron` takes its groups as arguments, and this module is
the single bootstrap that initialises the globals (`ensure_model_parallel`)
and hands out the groups (`ParallelGroups.from_parallel_state`) and the
stage facts (`is_pipeline_last_stage`, `tensor_parallel_rank`, ...). The
runner and the NeMo-RL workers ask here; nothing else imports parallel_state.
A group of None means "not parallel along this dimension".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist


def _ps():
    from megatron.core import parallel_state

    return parallel_state


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
        ps = _ps()
        return cls(
            tp=ps.get_tensor_model_parallel_group(),
            cp=ps.get_context_parallel_group(),
            dp=ps.get_data_parallel_group(),
            pp=ps.get_pipeline_model_parallel_group(),
            sequence_parallel=sequence_parallel,
        )


# --- bootstrap -------------------------------------------------------------------------------


def model_parallel_is_initialized() -> bool:
    return _ps().model_parallel_is_initialized()


def ensure_model_parallel(tp: int = 1, pp: int = 1) -> None:
    """Initialise Megatron's model-parallel groups (TP x PP over the default group) once.

    Groups left over from a destroyed default group (e.g. after a vLLM engine's
    exit) are rebuilt; groups already built with another TP size are a user error.
    Needs `torch.distributed` initialised.
    """
    ps = _ps()
    if ps.model_parallel_is_initialized() and _stale_groups():
        ps.destroy_model_parallel()
    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(tp, pp)
    elif ps.get_tensor_model_parallel_world_size() != tp:
        raise ValueError(
            f"parallel_state already initialised with TP={ps.get_tensor_model_parallel_world_size()},"
            f" the run asks for parallel.tp={tp}"
        )


def reset_model_parallel(tp: int = 1, pp: int = 1) -> None:
    """Rebuild Megatron's groups with other sizes (collective: every rank calls it). For one
    process that runs layouts in turn, e.g. the GPU kit: TP = world, then TP = 1."""
    ps = _ps()
    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    ps.initialize_model_parallel(tp, pp)


def _stale_groups() -> bool:
    """Megatron's groups belong to a destroyed default group (torch then reports them unregistered)."""
    ps = _ps()
    try:
        ps.get_tensor_model_parallel_world_size()
        ps.get_pipeline_model_parallel_rank()
    except (ValueError, RuntimeError):
        return True
    return False


# --- stage facts and groups of this rank ---------------------------------------------------


def is_pipeline_first_stage() -> bool:
    """This rank holds the embedding (pre_process)."""
    return _ps().is_pipeline_first_stage(ignore_virtual=True)


def is_pipeline_last_stage() -> bool:
    """This rank holds the final norm, the logits and the CLIPO head (post_process)."""
    return _ps().is_pipeline_last_stage(ignore_virtual=True)


def pipeline_world_size() -> int:
    return _ps().get_pipeline_model_parallel_world_size()


def pipeline_rank() -> int:
    return _ps().get_pipeline_model_parallel_rank()


def pipeline_last_rank() -> int:
    """Global rank of this pipeline's last stage (the `src` of a broadcast to the pipeline)."""
    return _ps().get_pipeline_model_parallel_last_rank()


def pipeline_group():
    return _ps().get_pipeline_model_parallel_group()


def tensor_parallel_rank() -> int:
    return _ps().get_tensor_model_parallel_rank()


def tensor_parallel_world_size() -> int:
    return _ps().get_tensor_model_parallel_world_size()


def tensor_parallel_group():
    return _ps().get_tensor_model_parallel_group()


def data_parallel_rank() -> int:
    return _ps().get_data_parallel_rank()


def context_parallel_rank() -> int:
    return _ps().get_context_parallel_rank()


def model_parallel_group():
    """TP x PP: the ranks that hold one copy of the model (grad-norm all-reduce)."""
    return _ps().get_model_parallel_group()


def embedding_group():
    """First and last pipeline stage when embeddings are tied; None for other ranks."""
    ps = _ps()
    return ps.get_embedding_group() if ps.is_rank_in_embedding_group() else None
