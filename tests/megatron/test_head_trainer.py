# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""HeadTrainer: no AdamW step (no decay) without an anchor; str group ids over DP."""

from __future__ import annotations

import copy

import pytest
import torch

from clipo_megatron.core import CLIPOConfig
from clipo_megatron.megatron.head_trainer import HeadTrainer

from .dist_utils import run_distributed

IDS = torch.arange(8)
GIDS = IDS // 4  # two groups of 4
VALID = torch.tensor([1, 1, 0, 0, 1, 1, 1, 0])  # both groups: >= 2 correct, >= 1 wrong
NO_VALID = torch.tensor([1, 1, 1, 1, 0, 0, 0, 1])  # all correct / one correct: no anchor


def _trainer(**kw) -> HeadTrainer:
    torch.manual_seed(0)
    return HeadTrainer(torch.nn.Linear(8, 4, bias=False), CLIPOConfig(embed_dim=4, **kw))


def _same_state(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            if not isinstance(y, dict) or not _same_state(x, y):
                return False
        elif isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def test_no_valid_group_on_a_fresh_head_is_not_a_decay_step():
    # lr 0.1, wd 0.5. The old step: grad 0 -> Adam's update 0 / (0 + eps) = 0, but decoupled
    # decay still multiplied W by 1 - lr * wd = 1 - 0.1 * 0.5 = 0.95.
    tr = _trainer(head_lr=0.1, head_weight_decay=0.5)
    w0 = tr.head.weight.detach().clone()
    out = tr.step(torch.randn(8, 8), NO_VALID, GIDS, IDS, step=0)
    assert out.metrics["clipo/num_anchors"] == 0.0
    assert out.metrics["clipo/head_updated"] == 0.0
    assert torch.equal(tr.head.weight, w0)  # old code: 0.95 * w0
    assert tr.optimizer.state_dict()["state"] == {}  # no moments, no step count
    assert tr.steps_done == 1 and torch.equal(out.rewards, torch.zeros(8))


def test_no_valid_group_after_real_steps_leaves_weights_and_adamw_state_bit_identical():
    tr = _trainer(head_lr=0.1, head_weight_decay=0.5)
    gen = torch.Generator().manual_seed(1)
    out = tr.step(torch.randn(8, 8, generator=gen), VALID, GIDS, IDS, step=0)
    assert out.metrics["clipo/head_updated"] == 1.0
    w1 = tr.head.weight.detach().clone()
    opt1 = copy.deepcopy(tr.optimizer.state_dict())
    assert int(opt1["state"][0]["step"]) == 1
    # Old code: step 2 with grad 0 still moved W by lr * m_hat / (sqrt(v_hat) + eps) + decay.
    out = tr.step(torch.randn(8, 8, generator=gen), NO_VALID, GIDS, IDS, step=1)
    assert out.metrics["clipo/head_updated"] == 0.0 and tr.steps_done == 2
    assert torch.equal(tr.head.weight, w1)
    assert _same_state(tr.optimizer.state_dict(), opt1)
    out = tr.step(torch.randn(8, 8, generator=gen), VALID, GIDS, IDS, step=2)
    assert out.metrics["clipo/head_updated"] == 1.0 and tr.steps_done == 3
    assert int(tr.optimizer.state_dict()["state"][0]["step"]) == 2


def test_str_group_ids_give_the_int_ids_step():
    pooled = torch.randn(8, 8, generator=torch.Generator().manual_seed(2))
    uids = [f"uid-{int(g)}" for g in GIDS]  # "uid-0" < "uid-1": same order as the ints
    a, b = _trainer(), _trainer()
    oa = a.step(pooled, VALID, uids, IDS, step=0)
    ob = b.step(pooled, VALID, GIDS, IDS, step=0)
    assert torch.equal(oa.rewards, ob.rewards) and torch.equal(oa.positive_ids, ob.positive_ids)
    assert torch.equal(a.head.weight, b.head.weight)


def _dp2_str_uids(rank, world):
    # Rank 0 holds groups "b" and "c" (rows 0-5), rank 1 groups "a" and "b" (rows 6-11):
    # group "b" spans both ranks. Over the union the ids map a -> 0, b -> 1, c -> 2 on both.
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 4, bias=False)
    tr = HeadTrainer(head, CLIPOConfig(embed_dim=4), dp_group=torch.distributed.group.WORLD)
    pooled = torch.randn(12, 8, generator=torch.Generator().manual_seed(3))
    uids = ["b", "b", "b", "c", "c", "c", "a", "a", "a", "b", "b", "b"]
    correct = torch.tensor([1, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1])
    rows = slice(0, 6) if rank == 0 else slice(6, 12)
    out = tr.step(pooled[rows], correct[rows], uids[rows], torch.arange(12)[rows], step=0)
    # Plain lists: tensors through the queue would be shared memory of an exited process.
    return {"rewards": out.rewards.tolist(), "weight": head.weight.detach().tolist()}


@pytest.mark.multiprocess
def test_dp2_str_uids_match_single_process_int_ids():
    res = run_distributed(_dp2_str_uids, 2)
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 4, bias=False)
    tr = HeadTrainer(head, CLIPOConfig(embed_dim=4))
    pooled = torch.randn(12, 8, generator=torch.Generator().manual_seed(3))
    gids = torch.tensor([1, 1, 1, 2, 2, 2, 0, 0, 0, 1, 1, 1])
    correct = torch.tensor([1, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1])
    ref = tr.step(pooled, correct, gids, torch.arange(12), step=0)
    got = torch.tensor(res[0]["rewards"] + res[1]["rewards"])
    torch.testing.assert_close(got, ref.rewards, rtol=1e-6, atol=1e-7)
    for r in (0, 1):
        w = torch.tensor(res[r]["weight"])
        torch.testing.assert_close(w, head.weight.detach(), rtol=1e-6, atol=1e-7)
