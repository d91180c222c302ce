# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Capture (the drivers' MicrobatchPooler on the final norm), head and head trainer on a real tiny
GPTModel in one process."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("megatron.core")

from clipo_megatron.core import contrastive_rewards, group_contrastive_loss  # noqa: E402
from clipo_megatron.megatron.head import attach_head, build_contrastive_head  # noqa: E402
from clipo_megatron.megatron.head_trainer import HeadTrainer  # noqa: E402
from clipo_megatron.runner.model.model_builder import build_gpt_model, transformer_config  # noqa: E402

from .common import ARCH, CFG, SEQ, batch, causal_mask, forward_and_pool, reference_mean  # noqa: E402

pytestmark = pytest.mark.mcore


@pytest.fixture(scope="module")
def model(mcore_single_process):
    torch.manual_seed(0)
    return build_gpt_model(ARCH).eval()


def _full_hidden(model, ids, pos):
    store = {}
    h = model.decoder.final_layernorm.register_forward_hook(
        lambda m, i, o: store.__setitem__("h", o.detach())
    )
    with torch.no_grad():
        logits = model(ids, pos, causal_mask(SEQ))
    h.remove()
    return logits, store["h"]  # [B, S, V], [S, B, D]


def test_capture_pools_response_tokens_in_the_logprob_forward(model):
    ids, mask, *_ = batch()
    pos = torch.arange(SEQ).expand_as(ids)
    ref_logits, hidden = _full_hidden(model, ids, pos)
    with torch.no_grad():
        logits, pooled = forward_and_pool(model, mask, ids, pos, causal_mask(SEQ))
    # Same forward, same logits (bit-identical), and pooled means equal to pooling the full [S, B, D].
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=0)
    torch.testing.assert_close(pooled, reference_mean(hidden, mask), rtol=1e-6, atol=1e-6)


def test_head_replicated_and_step_rewards_match_core(model):
    ids, mask, correct, gids, sids = batch()
    pos = torch.arange(SEQ).expand_as(ids)
    _, hidden = _full_hidden(model, ids, pos)
    pooled = reference_mean(hidden, mask)
    torch.manual_seed(1)
    head = build_contrastive_head(
        transformer_config(ARCH), input_size=ARCH.hidden_size, embed_dim=CFG.embed_dim
    )
    attach_head(model, head)
    assert "clipo_head" not in dict(model.named_children())
    assert not any("clipo_head" in k for k in model.state_dict())  # never leaks into the policy
    head_ref = copy.deepcopy(head)
    trainer = HeadTrainer(head, CFG)
    out = trainer.step(pooled, correct, gids, sids, step=0)
    # Reference: core loss on the same embeddings, rewards from the pre-update loss.
    z = head_ref(pooled)
    torch.testing.assert_close(z.norm(dim=-1), torch.ones(z.shape[0]), rtol=1e-6, atol=1e-6)
    res = group_contrastive_loss(z, correct, gids, CFG, step=0, sample_ids=sids)
    torch.testing.assert_close(out.rewards, contrastive_rewards(res, CFG), rtol=1e-6, atol=1e-6)
    res.loss.backward()
    opt = torch.optim.AdamW(
        head_ref.parameters(), lr=CFG.head_lr, weight_decay=CFG.head_weight_decay
    )
    opt.step()
    torch.testing.assert_close(head.proj.weight, head_ref.proj.weight, rtol=1e-6, atol=1e-7)
    assert out.metrics["clipo/num_anchors"] == float(res.num_anchors)


def test_fixed_head():
    from clipo_megatron.core import CLIPOConfig

    head = torch.nn.Linear(8, 4, bias=False)
    w0 = head.weight.detach().clone()
    cfg = CLIPOConfig(embed_dim=4, fixed_head=True, warmup_steps=3)
    tr = HeadTrainer(head, cfg)
    ids = torch.arange(8)
    out = tr.step(torch.randn(8, 8), torch.tensor([1, 1, 0, 0, 1, 1, 1, 0]), ids // 4, ids, step=0)
    assert torch.equal(head.weight, w0) and out.metrics["clipo/head_updated"] == 0.0


def test_head_state_dict_resume_is_exact():
    from clipo_megatron.core import CLIPOConfig

    cfg = CLIPOConfig(embed_dim=4, temperature=0.2)
    gen = torch.Generator().manual_seed(3)
    data = [
        (torch.randn(12, 8, generator=gen), torch.randint(0, 2, (12,), generator=gen))
        for _ in range(3)
    ]
    gids, sids = torch.arange(12) // 4, torch.arange(12)

    def run(trainer, steps):
        return [
            trainer.step(h, c, gids, sids, step=s).rewards
            for s, (h, c) in zip(steps, [data[s] for s in steps])
        ]

    torch.manual_seed(0)
    a = HeadTrainer(torch.nn.Linear(8, 4, bias=False), cfg)
    full = run(a, [0, 1, 2])
    torch.manual_seed(0)
    b = HeadTrainer(torch.nn.Linear(8, 4, bias=False), cfg)
    run(b, [0, 1])
    state = copy.deepcopy(b.state_dict())
    torch.manual_seed(123)  # a fresh process: different init and RNG until the load
    c = HeadTrainer(torch.nn.Linear(8, 4, bias=False), cfg)
    driver_rng = torch.get_rng_state()
    c.load_state_dict(state)
    resumed = run(c, [2])
    assert torch.equal(resumed[0], full[2])
    assert torch.equal(c.head.weight, a.head.weight)
    # The process-global RNG is the driver's: the head neither saves, restores nor draws from it.
    assert sorted(state) == ["head", "optimizer", "steps_done"]
    assert torch.equal(torch.get_rng_state(), driver_rng)


def test_bad_head_configs():
    cfg = transformer_config(ARCH)
    with pytest.raises(ValueError, match="head_type"):
        build_contrastive_head(cfg, input_size=64, embed_dim=16, head_type="conv")


def test_the_head_tp_mode_follows_the_linear_class_subclasses_included():
    """A subclass of either linear keeps its mode; a class that is neither is refused, not
    silently taken for a replicated head (the mode was `linear is ColumnParallelLinear`)."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from megatron.core.transformer.spec_utils import ModuleSpec

    from clipo_megatron.megatron.head import (
        ContrastiveHead,
        ContrastiveHeadSubmodules,
        shards_output,
    )

    class MyColumn(ColumnParallelLinear):
        pass

    class MyLinear(torch.nn.Linear):
        pass

    class Other(torch.nn.Module):
        pass

    assert shards_output(ColumnParallelLinear) and shards_output(MyColumn)
    assert not shards_output(torch.nn.Linear) and not shards_output(MyLinear)
    spec = ModuleSpec(module=ContrastiveHead, submodules=ContrastiveHeadSubmodules(linear=Other))
    with pytest.raises(ValueError, match="neither Megatron-Core's ColumnParallelLinear"):
        build_contrastive_head(transformer_config(ARCH), input_size=64, embed_dim=16, spec=spec)


def test_capture_keeps_only_pooled_rows(model):
    # The capture must not keep the [S, B, D] hidden states alive: after the
    # forward, the pooler holds the [B] row ids and the [B, D] means only.
    from clipo_megatron.megatron.pooling.microbatch_pooler import (
        SAMPLE_IDX_KEY,
        MicrobatchPooler,
        find_final_norm,
    )

    ids, mask, *_ = batch()
    pos = torch.arange(SEQ).expand_as(ids)
    pooler = MicrobatchPooler()
    meta = {SAMPLE_IDX_KEY: torch.arange(ids.shape[0]), "token_mask": mask}
    with torch.no_grad(), pooler.hooked(find_final_norm(model)):
        for _ in pooler.tee([meta]):
            model(ids, pos, causal_mask(SEQ))
    held = [t for v in (pooler.rows, pooler.pooled) for t in v]
    assert [tuple(t.shape) for t in held] == [(ids.shape[0],), (ids.shape[0], ARCH.hidden_size)]
    assert not pooler.pending
    assert not model.decoder.final_layernorm._forward_hooks  # hook removed after the block
