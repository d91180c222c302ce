# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo_step`: sums -> mean -> head step -> rewards, and the PP=2 broadcast."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("megatron.core")

import torch  # noqa: E402

from clipo_megatron.core import CLIPOConfig  # noqa: E402
from clipo_megatron.megatron.clipo_step import clipo_step  # noqa: E402
from clipo_megatron.megatron.head_trainer import HeadTrainer  # noqa: E402

from .dist_utils import run_distributed  # noqa: E402

pytestmark = pytest.mark.mcore

CFG = CLIPOConfig(embed_dim=8, temperature=0.1, warmup_steps=2)
D = 12


def _inputs():
    """Four groups of four rollouts; sums [16, D], counts [16] (hand-picked 1..4 tokens)."""
    gen = torch.Generator().manual_seed(3)
    sums = torch.randn(16, D, generator=gen)
    counts = torch.arange(16) % 4 + 1
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0])
    gids = torch.arange(4).repeat_interleave(4) * 7 + 1
    sids = torch.arange(16) + 50
    return sums, counts, correct, gids, sids


def _head(seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Linear(D, CFG.embed_dim, bias=False)


def test_clipo_step_equals_mean_then_trainer_step():
    sums, counts, correct, gids, sids = _inputs()
    head = _head()
    ref_trainer = HeadTrainer(copy.deepcopy(head), CFG)
    ref = ref_trainer.step(sums / counts.unsqueeze(-1).float(), correct, gids, sids, step=0)
    out = clipo_step(HeadTrainer(head, CFG), sums, counts, correct, gids, sids, step=0)
    # Same arithmetic in the same order: bit-identical, not merely close.
    torch.testing.assert_close(out.rewards, ref.rewards, rtol=0, atol=0)
    torch.testing.assert_close(head.weight, ref_trainer.head.weight, rtol=0, atol=0)
    assert out.metrics == ref.metrics
    assert not out.policy_should_update  # step 0 < warmup_steps 2
    assert clipo_step(
        HeadTrainer(_head(), CFG), sums, counts, correct, gids, sids, step=2
    ).policy_should_update


def test_clipo_step_rejects_mismatched_rows_and_empty_responses():
    sums, counts, correct, gids, sids = _inputs()
    trainer = HeadTrainer(_head(), CFG)
    with pytest.raises(ValueError, match="group_ids has 15 rows"):
        clipo_step(trainer, sums, counts, correct, gids[:15], sids, step=0)
    counts = counts.clone()
    counts[3] = 0
    with pytest.raises(ValueError, match="empty response"):
        clipo_step(trainer, sums, counts, correct, gids, sids, step=0)
    with pytest.raises(
        ValueError, match="last pipeline stage needs both"
    ):  # no pp_group: this is the last stage
        clipo_step(None, None, counts, correct, gids, sids, step=0, warmup_steps=0)


def _pp_worker(rank, world):
    import torch.distributed as dist

    sums, counts, correct, gids, sids = _inputs()
    pp = dist.new_group([0, 1])
    last = rank == world - 1
    trainer = HeadTrainer(_head(), CFG) if last else None
    out = clipo_step(
        trainer,
        sums if last else None,
        counts,
        correct,
        gids,
        sids,
        step=3,
        pp_group=pp,
        warmup_steps=CFG.warmup_steps,
    )
    return {"rewards": out.rewards, "metrics": out.metrics, "update": out.policy_should_update}


@pytest.mark.multiprocess
def test_pp2_rewards_reach_the_first_stage():
    sums, counts, correct, gids, sids = _inputs()
    ref = clipo_step(HeadTrainer(_head(), CFG), sums, counts, correct, gids, sids, step=3)
    res = run_distributed(_pp_worker, 2, timeout=120)
    for rank in (0, 1):
        # Broadcast copies the last stage's fp32 values; head math is identical -> exact.
        torch.testing.assert_close(res[rank]["rewards"], ref.rewards, rtol=0, atol=0)
        assert res[rank]["update"]
    assert res[0]["metrics"] == {} and res[1]["metrics"] == ref.metrics
