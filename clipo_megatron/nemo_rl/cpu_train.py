# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The CPU policy worker's `train`: `MegatronPolicyWorker.train` step for step, on CPU.

Why it follows NeMo-RL's worker so closely: the contract suite runs NeMo-RL's
real `grpo_train` over the CPU worker, so the loss function must be called the
way the GPU worker calls it (global batches; `global_valid_seqs/toks`
all-reduced over DP; the loss per microbatch as a share of the global loss;
gradients summed over DP; one optimizer step per global batch) and the result
must carry the metrics NeMo-RL's worker adds (`lr`, `wd`, `global_valid_*`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

# (global batch, micro-batch size) -> (microbatch data, its token logprobs [b, S]) per microbatch:
# the worker's forward over NeMo-RL's own microbatches (packed bins when the recipe packs).
Microbatches = Callable[[Any, int], Iterator[tuple[Any, torch.Tensor]]]


def dp_all_reduce(t: torch.Tensor, group) -> torch.Tensor:
    """In-place sum over the DP group (a no-op on a world of one)."""
    if group is not None and torch.distributed.get_world_size(group) > 1:
        torch.distributed.all_reduce(t, group=group)
    return t


def train_global_batches(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data,
    loss_fn,
    microbatches: Microbatches,
    *,
    dp_group,
    gbs: int,
    mbs: int,
    eval_mode: bool = False,
    clip_grad: float = 0.0,
) -> dict[str, Any]:
    """Train (or evaluate) `model` on this DP rank's shard `data` (a BatchedDataDict).

    Returns `global_loss` [n_global_batches], `grad_norm` [1] and `all_mb_metrics`
    (metric -> one value per microbatch), as NeMo-RL's worker does.
    """
    dp = torch.distributed.get_world_size(dp_group)
    total = int(dp_all_reduce(torch.tensor(data.size), dp_group))
    all_mb_metrics: list[dict[str, Any]] = []
    losses: list[float] = []
    grad_norm = torch.zeros(())
    model.train(not eval_mode)
    for gb_idx in range(total // gbs):
        batch = data.get_batch(batch_idx=gb_idx, batch_size=gbs // dp)
        sample_mask = batch["sample_mask"].float()  # [b]
        counts = torch.stack(
            [sample_mask.sum(), (batch["token_mask"][:, 1:] * sample_mask[:, None]).sum()]
        )
        global_valid_seqs, global_valid_toks = dp_all_reduce(counts, dp_group)
        optimizer.zero_grad(set_to_none=True)
        gb_metrics, gb_loss = [], 0.0
        with torch.set_grad_enabled(not eval_mode):
            for mb, lp in microbatches(batch, mbs):
                loss, metrics = loss_fn(
                    next_token_logprobs=lp[:, 1:],  # [mbs, S-1]
                    data=mb,
                    global_valid_seqs=global_valid_seqs,
                    global_valid_toks=global_valid_toks,
                )
                if not eval_mode:
                    loss.backward()
                gb_loss += float(loss.detach())
                gb_metrics.append(dict(metrics))
        if not eval_mode:
            for p in model.parameters():  # shares of a global loss: sum over DP
                if p.grad is not None:
                    dp_all_reduce(p.grad, dp_group)
            grad_norm = torch.nn.utils.clip_grad_norm_(
                model.parameters(), clip_grad if clip_grad > 0 else float("inf")
            )
            optimizer.step()
        group = optimizer.param_groups[0]
        for m in gb_metrics:  # as MegatronPolicyWorker.train adds them
            for k in list(m):
                if "_min" not in k and "_max" not in k:
                    m[k] = m[k] / (total // gbs)
            m.update(
                lr=group["lr"],
                wd=group["weight_decay"],
                global_valid_seqs=float(global_valid_seqs),
                global_valid_toks=float(global_valid_toks),
            )
        all_mb_metrics.extend(gb_metrics)
        losses.append(gb_loss)
    global_loss = dp_all_reduce(torch.tensor(losses, dtype=torch.float64), dp_group)
    mb_metrics: dict[str, list] = {}
    for m in all_mb_metrics:
        for k, v in m.items():
            mb_metrics.setdefault(k, []).append(v)
    return {
        "global_loss": global_loss.float(),
        "grad_norm": torch.tensor([float(grad_norm)]),
        "all_mb_metrics": mb_metrics,
    }
