# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The head step's path, driver side: r_CL for one GRPO step, from the workers to the estimator.

    ClipoAdvantageEstimator.compute_advantage        (NeMo-RL's grpo_train, once per step)
      -> head_step(correct [B], group_ids [B], step)  (a `HeadStep`: `WorkersHeadStep` in a run)
        -> every worker's `clipo_head_step`           (Ray, `run_all_workers_single_data`)
      <- per worker (row ids, r_CL); `collect_head_step` puts them in batch order
    r_CL [B] -> the estimator adds it to r before the group normalisation

Who calls it: the estimator alone (`advantage_estimator.py`); the driver builds it from the
policy's worker group and hands it over (`driver.py`). Where its rows come from: the
prev-logprob pass NeMo-RL ran just before, pooled on each worker's last pipeline stage and keyed
by the driver's row index (`clipo_sample_idx`, or the TransferQueue loop's announced rows;
`worker.py`). Where r_CL goes: back to the estimator as `HeadStepResult.rewards`, in
`train_data` order, with the head's metrics. No NeMo-RL import: tested on CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from clipo_megatron.nemo_rl.worker import CLIPO_HEAD_STEP


@dataclass
class HeadStepResult:
    rewards: torch.Tensor  # [B] contrastive rewards r_CL, train_data order
    metrics: dict[str, float] = field(default_factory=dict)


class HeadStep(Protocol):
    """What the estimator calls once per GRPO step: (correct [B], group_ids [B], step) -> r_CL."""

    def __call__(
        self, correct: torch.Tensor, group_ids: torch.Tensor, step: int
    ) -> HeadStepResult: ...


@dataclass(frozen=True)
class WorkersHeadStep:
    """The run's `HeadStep`: the head step on every policy worker (`run_all_workers` is NeMo-RL's
    `Policy.run_all_workers_single_data`, which takes keyword arguments only)."""

    run_all_workers: Callable[..., list[dict[str, Any]]]

    def __call__(self, correct: torch.Tensor, group_ids: torch.Tensor, step: int) -> HeadStepResult:
        results = self.run_all_workers(
            CLIPO_HEAD_STEP, correct=correct, group_ids=group_ids, step=step
        )
        return collect_head_step(results, int(correct.numel()))


def collect_head_step(results: list[dict[str, Any]], batch_size: int) -> HeadStepResult:
    """Per-worker {sample_idx, rewards, metrics} -> [B] rewards in batch order + the metrics."""
    rewards = assemble_rows(
        [(r["sample_idx"], r["rewards"]) for r in results], batch_size, name="contrastive rewards"
    )
    metrics: dict[str, Any] = next((r["metrics"] for r in results if r["metrics"]), {})
    return HeadStepResult(rewards=rewards, metrics=dict(metrics))


def assemble_rows(
    parts: list[tuple[torch.Tensor, torch.Tensor]], batch_size: int, *, name: str = "rewards"
) -> torch.Tensor:
    """Scatter per-worker (row index [b], values [b]) into a [B] tensor.

    Workers replicated over TP / CP (and the last PP stage of every DP rank)
    report the same rows; duplicates must agree exactly. Every row must be
    covered once at least.
    """
    out = torch.full((batch_size,), float("nan"), dtype=torch.float64)
    seen = torch.zeros(batch_size, dtype=torch.bool)
    for idx, val in parts:
        idx = idx.long().cpu()
        val = val.detach().double().cpu()
        if idx.numel() != val.numel():
            raise ValueError(
                f"{name}: a worker sent {idx.numel()} row ids and {val.numel()} values"
            )
        if idx.numel() == 0:
            continue
        if int(idx.min()) < 0 or int(idx.max()) >= batch_size:
            raise ValueError(
                f"{name}: row ids outside [0, {batch_size}) — was the batch changed between the "
                "logprob pass and the advantage step?"
            )
        dup = seen[idx]
        if bool(dup.any()) and not torch.equal(out[idx[dup]], val[dup]):
            raise ValueError(
                f"{name}: replicas disagree on rows {idx[dup][out[idx[dup]] != val[dup]].tolist()[:8]}"
            )
        out[idx] = val
        seen[idx] = True
    if not bool(seen.all()):
        missing = (~seen).nonzero().flatten().tolist()
        raise ValueError(
            f"{name}: rows {missing[:8]}{'...' if len(missing) > 8 else ''} missing from the workers' "
            "results (no hidden states captured for them in the logprob pass)"
        )
    return out.float()
