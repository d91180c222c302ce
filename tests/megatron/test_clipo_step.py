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
    """Four groups of four rollouts; pooled means [16, D]."""
    gen = torch.Generator().manual_seed(3)
    pooled = torch.randn(16, D, generator=gen)
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0])
    gids = torch.arange(4).repeat_interleave(4) * 7 + 1
    sids = torch.arange(16) + 50
    return pooled, correct, gids, sids


def _head(seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Linear(D, CFG.embed_dim, bias=False)


def test_clipo_step_equals_the_trainer_step():
    pooled, correct, gids, sids = _inputs()
    head = _head()
    ref_trainer = HeadTrainer(copy.deepcopy(head), CFG)
    ref = ref_trainer.step(pooled, correct, gids, sids, step=0)
    out = clipo_step(HeadTrainer(head, CFG), pooled, correct, gids, sids, step=0)
    # Same arithmetic in the same order: bit-identical, not merely close.
    torch.testing.assert_close(out.rewards, ref.rewards, rtol=0, atol=0)
    torch.testing.assert_close(out.embeddings, ref.embeddings, rtol=0, atol=0)
    torch.testing.assert_close(head.weight, ref_trainer.head.weight, rtol=0, atol=0)
    assert out.metrics == ref.metrics


def test_clipo_step_on_the_device_with_host_labels():
    """Emulated CUDA: rows and head on the device, labels and ids from the driver's host.
    Before the step moved them, the first CLIPO step of every GPU run raised here."""
    from clipo_testkit.emulated_cuda import emulated_cuda, is_on_device

    pooled, correct, gids, sids = _inputs()
    ref = clipo_step(HeadTrainer(_head(), CFG), pooled, correct, gids, sids, step=0)
    with emulated_cuda():
        trainer = HeadTrainer(_head().to("cuda"), CFG)
        out = clipo_step(trainer, pooled.cuda(), correct, gids, sids, step=0)
        assert is_on_device(out.rewards) and is_on_device(out.embeddings)
        again = clipo_step(trainer, pooled.cuda(), correct.cuda(), gids, sids.cuda(), step=1)
        assert is_on_device(again.rewards)
    torch.testing.assert_close(out.rewards.cpu(), ref.rewards, rtol=0, atol=0)


@pytest.mark.parametrize(
    "method",
    [
        {"loss_type": "supcon"},
        {"loss_type": "softnn", "similarity": "dot"},
        {"anchors": "all", "denominator": "positive_and_negatives", "head_type": "mlp"},
        {"fixed_head": True, "reward_constant": 0.1},
    ],
    ids=["supcon", "softnn_dot", "all_anchors_mlp", "fixed_head_constant"],
)
def test_every_method_variant_runs_on_the_device(method):
    """The core's group layout, sampling, losses, rewards and metrics under CUDA's rules."""
    from clipo_megatron.core.contrastive_loss import l2_normalize
    from clipo_testkit.emulated_cuda import emulated_cuda

    cfg = CLIPOConfig(embed_dim=8, temperature=0.1, **method)

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.hidden = torch.nn.Sequential(torch.nn.Linear(D, D, bias=False), torch.nn.ReLU())
            self.proj = torch.nn.Linear(D, cfg.embed_dim, bias=False)

        def forward(self, x):
            return l2_normalize(self.proj(self.hidden(x)))

    def head():
        return Mlp() if cfg.head_type == "mlp" else _head()

    pooled, correct, gids, sids = _inputs()
    ref = clipo_step(HeadTrainer(head(), cfg), pooled, correct, gids, sids, step=1)
    with emulated_cuda():
        out = clipo_step(
            HeadTrainer(head().cuda(), cfg), pooled.cuda(), correct, gids, sids, step=1
        )
        rewards = out.rewards.cpu()
    torch.testing.assert_close(rewards, ref.rewards, rtol=1e-6, atol=1e-6)
    assert out.metrics == pytest.approx(ref.metrics, rel=1e-6, abs=1e-6)


def test_clipo_step_rejects_mismatched_rows():
    pooled, correct, gids, sids = _inputs()
    trainer = HeadTrainer(_head(), CFG)
    with pytest.raises(ValueError, match="group_ids has 15 rows"):
        clipo_step(trainer, pooled, correct, gids[:15], sids, step=0)
    with pytest.raises(ValueError, match="pooled has 15 rows"):
        clipo_step(trainer, pooled[:15], correct, gids, sids, step=0)
    with pytest.raises(
        ValueError, match="last pipeline stage needs both"
    ):  # no pp_group: this is the last stage
        clipo_step(None, None, correct, gids, sids, step=0)


def _pp_worker(rank, world, emulate):
    import contextlib

    import torch.distributed as dist

    from clipo_testkit.emulated_cuda import emulated_cuda, is_on_device

    pooled, correct, gids, sids = _inputs()
    pp = dist.new_group([0, 1])
    last = rank == world - 1
    with emulated_cuda() if emulate else contextlib.nullcontext():
        head = _head().to("cuda") if emulate else _head()
        trainer = HeadTrainer(head, CFG) if last else None
        rows = pooled.cuda() if emulate else pooled
        out = clipo_step(trainer, rows if last else None, correct, gids, sids, step=3, pp_group=pp)
        assert is_on_device(out.rewards) == emulate
    return {"rewards": out.rewards.cpu(), "metrics": out.metrics, "emb": out.embeddings.cpu()}


@pytest.mark.multiprocess
@pytest.mark.parametrize("emulate", [False, True], ids=["host", "emulated_cuda_nccl"])
def test_pp2_rewards_reach_the_first_stage(emulate):
    pooled, correct, gids, sids = _inputs()
    ref = clipo_step(HeadTrainer(_head(), CFG), pooled, correct, gids, sids, step=3)
    res = run_distributed(_pp_worker, 2, emulate, timeout=120)
    for rank in (0, 1):
        # Broadcast copies the last stage's fp32 values; head math is identical -> exact.
        torch.testing.assert_close(res[rank]["rewards"], ref.rewards, rtol=0, atol=0)
        torch.testing.assert_close(res[rank]["emb"], ref.embeddings, rtol=0, atol=0)
        assert res[rank]["metrics"] == ref.metrics


def test_a_registered_toy_loss_drives_the_head_step():
    """One registration: the head trainer's step trains on the toy loss and rewards with its lambda."""
    from tests.core.test_contrastive_registry import (
        TOY_LAMBDA,
        margin_reference,
        toy_loss_registered,
    )

    pooled, correct, gids, sids = _inputs()
    head = _head()
    w0 = head.weight.detach().clone()
    with toy_loss_registered() as name:
        cfg = CLIPOConfig(embed_dim=8, temperature=0.1, loss_type=name)
        out = clipo_step(HeadTrainer(head, cfg), pooled, correct, gids, sids, step=0)
    want = margin_reference(out.embeddings.double(), correct.tolist(), gids.tolist(), 0.1)
    anchors = want != 0
    # r_CL = max(-lambda * L_i, -0.5) on the anchors, 0 elsewhere (fp32 head: a few ulp).
    expect = torch.where(anchors, (-TOY_LAMBDA * want).clamp_min(-0.5), torch.zeros_like(want))
    torch.testing.assert_close(out.rewards.double(), expect, rtol=0, atol=1e-5)
    assert out.metrics["clipo/loss"] == pytest.approx(float(want.sum() / anchors.sum()), abs=1e-5)
    assert not torch.equal(head.weight, w0)  # the head stepped on the toy loss
