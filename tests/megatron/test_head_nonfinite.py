# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""HeadTrainer skips a non-finite step (issue 24 item 2): the head step both drivers run
(the runner and NeMo-RL's workers, through `clipo_step`) leaves weights and AdamW moments
bit-identical when the loss or a gradient is NaN / inf, flags it in its metrics, and the
next finite step trains; over DP, one rank's non-finite loss makes every rank skip."""

from __future__ import annotations

import copy
import math

import torch

from clipo_megatron.core import CLIPOConfig
from clipo_megatron.megatron.head_trainer import HeadTrainer

from .dist_utils import run_distributed

IDS = torch.arange(8)
GIDS = IDS // 4  # two groups of 4
VALID = torch.tensor([1, 1, 0, 0, 1, 1, 1, 0])  # both groups: >= 2 correct, >= 1 wrong


# Dot-product similarity is unbounded: states of norm ~1e20 give s_ij ~ 1e40 / tau, past
# fp32's 3.4e38, so the loss is inf - inf = NaN while every embedding is finite.
CFG = dict(embed_dim=4, head_lr=0.1, similarity="dot")


def _trainer() -> HeadTrainer:
    torch.manual_seed(0)
    return HeadTrainer(torch.nn.Linear(8, 4, bias=False), CLIPOConfig(**CFG))


def _pooled(seed: int, huge_row: int | None = None) -> torch.Tensor:
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(seed))  # [B, D]
    if huge_row is not None:
        x[huge_row] *= 1e20
    return x


def test_a_nan_row_skips_the_head_step_and_the_next_step_trains():
    tr = _trainer()
    tr.step(_pooled(1), VALID, GIDS, IDS, step=0)  # one real step: moments exist
    w1 = tr.head.weight.detach().clone()
    opt1 = copy.deepcopy(tr.optimizer.state_dict())
    out = tr.step(_pooled(2, huge_row=0), VALID, GIDS, IDS, step=1)  # overflows
    assert math.isnan(out.metrics["clipo/loss"])
    assert out.metrics["clipo/head_skipped_nonfinite"] == 1.0
    assert out.metrics["clipo/head_updated"] == 0.0 and tr.steps_done == 2
    assert torch.equal(tr.head.weight, w1)
    assert torch.equal(
        opt1["state"][0]["exp_avg_sq"], tr.optimizer.state_dict()["state"][0]["exp_avg_sq"]
    )
    assert int(tr.optimizer.state_dict()["state"][0]["step"]) == 1  # AdamW did not count it
    assert all(p.grad is None for p in tr.head.parameters())  # no NaN gradient left behind
    out = tr.step(_pooled(3), VALID, GIDS, IDS, step=2)
    assert out.metrics["clipo/head_skipped_nonfinite"] == 0.0
    assert out.metrics["clipo/head_updated"] == 1.0
    assert not torch.equal(tr.head.weight, w1) and bool(torch.isfinite(tr.head.weight).all())


def _dp_worker(rank: int, world: int) -> dict:
    """DP = 2, finite rows everywhere, but rank 1's loss value is inf (a constant added: its
    gradients, summed over DP, stay finite). Rank 0 alone sees nothing wrong; both must skip,
    or the two replicas of the head part ways."""
    import dataclasses

    import torch.distributed as dist

    import clipo_megatron.megatron.head_trainer as ht

    real = ht.group_contrastive_loss

    def loss_inf_on_rank1(*a, **k):
        res = real(*a, **k)
        return dataclasses.replace(res, loss=res.loss + math.inf) if rank == 1 else res

    ht.group_contrastive_loss = loss_inf_on_rank1
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 4, bias=False)
    tr = HeadTrainer(head, CLIPOConfig(**CFG), dp_group=dist.group.WORLD)
    w0 = head.weight.detach().clone()
    rows = slice(4 * rank, 4 * rank + 4)  # rank r holds group r
    out = tr.step(_pooled(5)[rows], VALID[rows], GIDS[rows], IDS[rows], step=0)
    return {
        "skipped": out.metrics["clipo/head_skipped_nonfinite"],
        "unchanged": bool(torch.equal(head.weight, w0)),
    }


def test_over_dp_one_ranks_non_finite_loss_makes_every_rank_skip():
    results = run_distributed(_dp_worker, 2)
    assert [results[r]["skipped"] for r in (0, 1)] == [1.0, 1.0]
    assert [results[r]["unchanged"] for r in (0, 1)] == [True, True]
