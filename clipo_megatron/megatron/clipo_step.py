# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One CLIPO step: a rank's pooled rows -> its contrastive rewards. Every driver calls this.

The single-machine runner (`runner/run.py`), the CPU policy worker and the GPU
worker extension (both through `nemo_rl/worker.py`) hand it the rows the
logprob pass pooled (`MicrobatchPooler`, final-norm hook) and get back r_CL:

    head forward -> DP all-gather (complete groups) -> group loss -> rewards from
    the pre-update loss -> one AdamW step on the head -> metrics

The head lives on the last pipeline stage only. Drivers that need the rewards
on every stage (the runner, whose stages all run the policy update) pass
`pp_group`: the other stages pass `trainer=None, pooled=None` and receive
rewards, metrics and embeddings by broadcast, the way NeMo-RL broadcasts
logprobs. NeMo-RL's driver instead collects each last-stage worker's rows by
id (`nemo_rl/head_step.assemble_rows`) and calls this on the last stage alone.

Devices: every tensor made here lives on the pooled rows' device; labels and
ids arrive on any device (the driver's host tensors, say) and `HeadTrainer.step`
moves them there first, so collectives carry device tensors (NCCL takes
nothing else).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clipo_megatron.core.groups import GroupIds
from clipo_megatron.megatron.gather import broadcast_from_last_stage
from clipo_megatron.megatron.head_trainer import HeadTrainer
from clipo_megatron.megatron.parallel import group_rank, group_size


@dataclass
class ClipoStepResult:
    rewards: torch.Tensor  # [B_local] r_CL (detached, fp32) on the rows' device, every stage
    metrics: dict[str, float]  # the step's contrastive metrics, every stage
    embeddings: torch.Tensor  # [B_local, d(/tp)] head outputs before the update (detached)


def is_last_stage(pp_group=None) -> bool:
    return group_rank(pp_group) == group_size(pp_group) - 1


def clipo_step(
    trainer: HeadTrainer | None,
    pooled: torch.Tensor | None,
    correct: torch.Tensor,
    group_ids: GroupIds,
    sample_ids: torch.Tensor,
    *,
    step: int,
    pp_group=None,
    device: torch.device | str | None = None,
    empty: torch.Tensor | None = None,
) -> ClipoStepResult:
    """pooled [B_local, D]: mean response hidden states (None off the last stage).
    correct / group_ids / sample_ids [B_local]: binary rewards and *global* ids (identical on
    every rank that holds the row). trainer: the last stage's `HeadTrainer` (its dp_group is
    the last stage's DP group). device: where the other stages want their rewards (default:
    the current CUDA device when CUDA is available, else the host). empty [B_local] bool: rows
    that pooled no token (the last stage's `MicrobatchPooler.empty_rows`); r_CL 0 for them,
    their groups computed over the rest, counted in `clipo/empty_responses`."""
    b = len(correct)
    for name, t in (("group_ids", group_ids), ("sample_ids", sample_ids)):
        if len(t) != b:  # tensors, arrays or lists (string group ids)
            raise ValueError(f"{name} has {len(t)} rows but correct has {b}: one row per rollout")
    last = is_last_stage(pp_group)
    if last and (trainer is None or pooled is None):
        raise ValueError("the last pipeline stage needs both a HeadTrainer and the pooled rows")
    if last:
        assert trainer is not None and pooled is not None  # checked above
        if pooled.shape[0] != b:
            raise ValueError(f"pooled has {pooled.shape[0]} rows, correct {b}")
        out = trainer.step(
            pooled.float(), correct, group_ids, sample_ids, step=step, empty=empty
        )  # moves ids
        rewards = out.rewards.float().contiguous()  # [B_local]
        if group_size(pp_group) == 1:
            return ClipoStepResult(rewards, out.metrics, out.embeddings)
        extras = (out.metrics, out.embeddings.cpu())
        dev = pooled.device
    else:
        rewards, extras = None, None
        dev = torch.device(device or _default_device())
    rewards = broadcast_from_last_stage(
        rewards, pp_group=pp_group, shape=(b,), dtype=torch.float32, device=dev
    )
    metrics, embeddings = broadcast_from_last_stage(extras, pp_group=pp_group, device=dev)
    return ClipoStepResult(rewards, metrics, embeddings.to(dev))


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
