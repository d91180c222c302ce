# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One CLIPO step from captured response sums to per-rollout contrastive rewards.

Why one function: every caller (NeMo-RL worker extension, single-machine
runner) needs the same order of operations, and getting it wrong is silent:
counts come from the *full* response mask (no communication), the mean is
finished only after the SP/CP all-reduce, the head runs on the last pipeline
stage only, and the other stages receive rewards by broadcast (the way
NeMo-RL broadcasts logprobs). The head update happens inside
`HeadTrainer.step`, after the rewards were taken from the pre-update loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clipo_megatron.core.config import CLIPOConfig
from clipo_megatron.core.pooling import mean_from_sums
from clipo_megatron.megatron.gather import broadcast_from_last_stage
from clipo_megatron.megatron.head_trainer import HeadTrainer
from clipo_megatron.megatron.parallel import group_rank, group_size


@dataclass
class ClipoStepResult:
    rewards: torch.Tensor  # [B_local] contrastive rewards (detached), on every pipeline stage
    metrics: dict[str, float]  # empty on non-last pipeline stages
    policy_should_update: bool  # False during warm-up


def is_last_stage(pp_group=None) -> bool:
    return group_rank(pp_group) == group_size(pp_group) - 1


def clipo_step(
    trainer: HeadTrainer | None,
    response_sums: torch.Tensor | None,
    response_counts: torch.Tensor,
    correct: torch.Tensor,
    group_ids: torch.Tensor,
    sample_ids: torch.Tensor,
    *,
    step: int,
    pp_group=None,
    warmup_steps: int | None = None,
) -> ClipoStepResult:
    """Captured sums -> mean -> head (+ DP gather, loss, AdamW) -> rewards on every stage.

    response_sums [B_local, D]: already reduced over SP/CP (`sharded_response_sums`),
    None on non-last pipeline stages. response_counts [B_local]: response tokens
    per rollout from the full mask. correct / group_ids / sample_ids [B_local]:
    binary rewards and *global* ids (identical on every rank that holds the row).
    trainer: the last stage's `HeadTrainer` (None elsewhere; its dp_group is the
    DP group of the last stage). warmup_steps: needed on stages without a trainer
    (defaults to the trainer's config), so every stage agrees on warm-up.
    """
    b = response_counts.shape[0]
    for name, t in (("correct", correct), ("group_ids", group_ids), ("sample_ids", sample_ids)):
        if len(t) != b:  # tensors, arrays or lists (string group ids)
            raise ValueError(
                f"{name} has {len(t)} rows but response_counts has {b}: one row per rollout"
            )
    last = is_last_stage(pp_group)
    if last and (trainer is None or response_sums is None):
        raise ValueError(
            "the last pipeline stage needs both a HeadTrainer and the captured response sums"
        )
    if warmup_steps is None and trainer is None:
        raise ValueError("pass warmup_steps= on pipeline stages without a HeadTrainer")
    if warmup_steps is None:
        assert trainer is not None  # checked above
        warmup = trainer.cfg
    else:
        warmup = CLIPOConfig(warmup_steps=warmup_steps)
    rewards: torch.Tensor | None = None
    metrics: dict[str, float] = {}
    if last:
        assert trainer is not None and response_sums is not None  # checked above
        if response_sums.shape[0] != b:
            raise ValueError(
                f"response_sums has {response_sums.shape[0]} rows, response_counts {b}"
            )
        pooled = mean_from_sums(response_sums.float(), response_counts.float())  # [B_local, D]
        out = trainer.step(pooled, correct, group_ids, sample_ids, step=step)
        rewards, metrics = out.rewards.float().contiguous(), out.metrics
    rewards = broadcast_from_last_stage(
        rewards, (b,), torch.float32, pp_group=pp_group
    )  # [B_local]
    return ClipoStepResult(
        rewards=rewards, metrics=metrics, policy_should_update=warmup.policy_updates_at(step)
    )
