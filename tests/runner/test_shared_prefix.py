# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Shared-prefix passes equal the per-rollout passes: logprobs, pooled states, gradients.

Reference: a naive loop written here, one forward per rollout over exactly its own
prompt + response (no padding), log-softmax and a mean of the final-norm outputs over
its response tokens. The packed passes (`train.shared_prefix=true`) and the per-rollout
passes must both match it to 1e-5 (fp32); the parameter gradients of a policy-gradient
loss, where the prompt's gradient is the sum over its responses, must match the
reference's gradients, and a whole `policy_update` must move the weights the same way.
TP = 2 and PP = 2 (two gloo processes) run the packed passes on sharded / staged models
and must give the single-process reference's numbers.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")

from tests.megatron.dist_utils import run_distributed  # noqa: E402

pytestmark = [pytest.mark.mcore, pytest.mark.runner]
TOL = dict(rtol=1e-5, atol=1e-5)
VOCAB = 96  # divisible by TP = 2


def _hf(seed=0):
    from clipo_testkit.tiny_models import tiny_hf_config, tiny_hf_model

    cfg = tiny_hf_config(
        "llama", vocab_size=VOCAB, hidden=64, ffn=128, tied=False, max_positions=128
    )
    return tiny_hf_model(cfg, seed)


def _batch(seed=0):
    """3 prompt groups of 4 rollouts, prompts of 9 / 5 / 13 tokens, responses of 1-7 tokens."""
    from clipo_megatron.runner.passes import pack

    g = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for plen in (9, 5, 13):
        p = torch.randint(1, VOCAB, (plen,), generator=g).tolist()
        for _ in range(4):
            n = int(torch.randint(1, 8, (1,), generator=g))
            prompts.append(p)
            responses.append(torch.randint(1, VOCAB, (n,), generator=g).tolist())
    ids, mask = pack(prompts, responses, pad_id=0)
    adv = torch.randn(ids.shape[0], generator=g)
    return ids, mask, adv


def _naive(model, ids, mask, adv):
    """Per rollout, unpadded: logprobs [B, S], pooled [B, D], grads of sum_i adv_i * sum_t lp_it."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import find_final_norm
    from clipo_megatron.runner.model.policy_passes import forward_logits, token_logprobs

    captured = []
    h = find_final_norm(model).register_forward_hook(lambda _m, _i, o: captured.append(o))
    model.zero_grad(set_to_none=True)
    lps = torch.zeros(ids.shape, dtype=torch.float32)
    pooled = []
    for b in range(ids.shape[0]):
        n = int(mask[b].nonzero().max()) + 1
        row = ids[b : b + 1, :n]
        lp = token_logprobs(forward_logits(model, row), row)[0]  # [n]
        resp = mask[b, :n]
        (adv[b] * lp[resp].sum()).backward()
        lps[b, :n] = torch.where(resp, lp.detach(), 0.0)
        pooled.append(captured.pop()[:, 0][resp].mean(0).detach())  # [S, 1, D] -> [D]
    h.remove()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    return lps, torch.stack(pooled), grads


def _layout_grads(model, ids, mask, adv, shared_prefix, target_fn=None):
    """Grads of the same loss through the runner's micro-batches (2 groups per micro-batch)."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import SAMPLE_IDX_KEY
    from clipo_megatron.runner.micro_batches import forward, micro_batches, rollout_logprobs
    from clipo_megatron.runner.model.policy_passes import target_logprobs

    model.zero_grad(set_to_none=True)
    for mb in micro_batches(ids, mask, 8, shared_prefix=shared_prefix):
        lp = rollout_logprobs(forward(model, mb), mb, target_fn or target_logprobs, ids.shape[1])
        rows = mb[SAMPLE_IDX_KEY]
        (adv[rows, None] * torch.where(mask[rows], lp, 0.0)).sum().backward()
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def test_packed_layout_is_block_causal_with_continued_positions():
    from clipo_megatron.runner.model.shared_prefix import plan_shared_prefix
    from clipo_megatron.runner.passes import pack

    ids, mask = pack([[5, 6, 7], [5, 6, 7], [8, 9]], [[1, 2], [3], [4, 4, 4]], pad_id=0)
    (p,) = plan_shared_prefix(ids, mask, max_rollouts=16)
    assert p.rollouts.tolist() == [0, 1, 2]
    assert p.ids.tolist() == [[5, 6, 7, 1, 2, 3], [8, 9, 4, 4, 4, 0]]
    assert p.position_ids[0].tolist() == [0, 1, 2, 3, 4, 3]  # r_2 restarts at the prompt's end
    assert p.position_ids[1, :5].tolist() == [0, 1, 2, 3, 4]
    assert p.segments.tolist() == [[-1, -1, -1, 0, 0, 1], [-1, -1, 2, 2, 2, -1]]
    allowed = ~p.attention_mask[0, 0]
    assert allowed[5].tolist() == [True, True, True, False, False, True]  # r_2 skips r_1
    assert allowed[4].tolist() == [True, True, True, True, True, False]
    pad = ~p.attention_mask[1, 0, 5]
    assert pad[5] and not pad[:5].any()  # padding sees itself only
    # the first token of every response is predicted at the prompt's last position
    first = (p.dst[:, 0] < 2) & (p.dst[:, 1] == 3)  # rollouts 0 and 1 at their first response token
    assert p.src[first].tolist() == [[0, 2], [0, 2]]
    assert p.src[p.dst[:, 0] == 2].tolist() == [[1, 1], [1, 2], [1, 3]]
    assert p.target.tolist() == [1, 2, 3, 4, 4, 4]


def test_micro_batches_hold_whole_groups():
    from clipo_megatron.runner.micro_batches import micro_batches

    ids, mask, _ = _batch()
    mbs = micro_batches(ids, mask, 5, shared_prefix=True)
    assert [mb["clipo_sample_idx"].tolist() for mb in mbs] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
    ]  # 4 + 4 > 5: one group each
    assert len(micro_batches(ids, mask, 100, shared_prefix=True)) == 1
    uni = micro_batches(ids, mask, 8, shared_prefix=True, uniform=True)  # 3 groups: 1 per mb
    assert len({tuple(mb["ids"].shape) for mb in uni}) == 1 and len(uni) == 3


@pytest.fixture(scope="module")
def single(mcore_single_process):
    from clipo_megatron.runner.policy import build_policy

    model, _ = build_policy(_hf())
    ids, mask, adv = _batch()
    return model, ids, mask, adv, _naive(model, ids, mask, adv)


@pytest.mark.parametrize("shared_prefix", [True, False])
def test_logprobs_and_pooled_states_match_per_rollout(single, shared_prefix):
    from clipo_megatron.runner.passes import logprob_and_pool

    model, ids, mask, _, (ref_lp, ref_pooled, _) = single
    lp, pooled, _, _ = logprob_and_pool(model, ids, mask, 8, shared_prefix=shared_prefix)
    torch.testing.assert_close(torch.where(mask, lp, 0.0), ref_lp, **TOL)
    torch.testing.assert_close(pooled, ref_pooled, **TOL)
    assert float(ref_lp[mask].abs().min()) > 0.1  # real logprobs, not zeros


@pytest.mark.parametrize("shared_prefix", [True, False])
def test_gradients_match_per_rollout(single, shared_prefix):
    model, ids, mask, adv, (_, _, ref_grads) = single
    grads = _layout_grads(model, ids, mask, adv, shared_prefix)
    assert grads.keys() == ref_grads.keys()
    for k, g in grads.items():
        torch.testing.assert_close(g, ref_grads[k], **TOL, msg=k)
    emb = ref_grads["embedding.word_embeddings.weight"]
    prompt_tok = int(ids[8, 0])  # group 3's first prompt token: gets gradient from 4 responses
    assert float(emb[prompt_tok].abs().sum()) > 0


def _sgd_update(model, ids, mask, adv, old, shared_prefix, **kw):
    """One `policy_update` with SGD (lr 1): the weight change is the clipped gradient itself.

    (Adam's first step is ~lr * sign(g), which turns fp32 reduction-order noise in ~0 gradients
    into visible differences.)
    """
    from clipo_megatron.core.objectives import get_objective
    from clipo_megatron.runner.passes import PolicyLoss, UpdateBatch, policy_update

    loss = PolicyLoss(get_objective("grpo"), None, None, 0.0)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    batch = UpdateBatch(ids, mask, old, adv)
    return policy_update(model, opt, batch, loss, 5, 1.0, shared_prefix=shared_prefix, **kw)


def _weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "extra" not in k}


@pytest.fixture(scope="module")
def reference_update(single):
    """The per-rollout update on a fresh copy of the policy: old logprobs, metrics, updated weights."""
    from clipo_megatron.runner.policy import build_policy

    _, ids, mask, adv, (ref_lp, _, _) = single
    # off-policy old logprobs, so that the clip is active
    old = ref_lp - 0.05 * torch.randn(ref_lp.shape, generator=torch.Generator().manual_seed(1))
    model, _ = build_policy(_hf())
    m = _sgd_update(model, ids, mask, adv, old, False)
    return old, m, _weights(model)


def test_policy_update_moves_weights_the_same(single, reference_update):
    from clipo_megatron.runner.policy import build_policy

    _, ids, mask, adv, _ = single
    old, m0, w0 = reference_update
    model, _ = build_policy(_hf())
    m1 = _sgd_update(model, ids, mask, adv, old, True)
    assert m0.keys() == m1.keys()
    for k in m0:
        torch.testing.assert_close(torch.tensor(m1[k]), torch.tensor(m0[k]), **TOL, msg=k)
    for k, w in _weights(model).items():
        torch.testing.assert_close(w, w0[k], **TOL, msg=k)
    assert m1["pg/grad_norm"] > 1e-2  # a real step


def _mp_worker(rank, world, layout, old_np):
    from clipo_megatron.runner.layout import Layout
    from clipo_megatron.runner.passes import logprob_and_pool
    from clipo_megatron.runner.policy import build_policy

    lay = Layout.init(*((2, 1) if layout == "tp" else (1, 2)))
    model, arch = build_policy(_hf(), lay.tp, lay.pp)
    ids, mask, adv = _batch()
    old = torch.from_numpy(old_np)
    lp, pooled, _, _ = logprob_and_pool(model, ids, mask, 8, layout=lay)
    m = _sgd_update(model, ids, mask, adv, old, True, layout=lay)
    full = lay.full_state(model.state_dict(), arch)
    # numpy through the queue: torch tensors would be shared by file descriptor, and the worker
    # exits before the parent reads them
    return {
        "lp": lp.numpy(),
        "pooled": pooled.numpy(),
        "update": m,
        "weights": {k: v.numpy() for k, v in full.items()},
    }


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("layout", ["tp", "pp"])
def test_packed_passes_under_tp_and_pp_match_single_process(single, reference_update, layout):
    """Packed passes on a TP = 2 shard / PP = 2 stages: logprobs, pooled states, and an SGD update whose
    weights carry the gradients, all equal to the single-process per-rollout numbers."""
    _, ids, mask, _, (ref_lp, ref_pooled, _) = single
    old, m0, w0 = reference_update
    res = run_distributed(_mp_worker, 2, layout, old.numpy(), timeout=300)
    for r in res.values():
        lp, pooled = torch.from_numpy(r["lp"]), torch.from_numpy(r["pooled"])
        torch.testing.assert_close(torch.where(mask, lp, 0.0), ref_lp, **TOL)
        torch.testing.assert_close(pooled, ref_pooled, **TOL)
        for k in ("pg/loss", "pg/grad_norm"):
            torch.testing.assert_close(
                torch.tensor(r["update"][k]), torch.tensor(m0[k]), **TOL, msg=k
            )
        assert r["weights"].keys() == w0.keys()
        for k, w in r["weights"].items():
            torch.testing.assert_close(torch.from_numpy(w), w0[k], **TOL, msg=k)


def test_an_empty_response_leaves_the_contrastive_set(single):
    """The runner's path (`Run._train_on`): the logprob pass flags a row with no response token
    and pools it to zeros; `clipo_step` leaves it out: r_CL 0 for it, the rest as if it were not
    in the batch (the same step on the other rows, 1e-6), counted in `clipo/empty_responses`.
    One row per rollout: shared-prefix packing finds the prompt at the first response token, and
    the runner's rollouts always hold one (an empty generation keeps its EOS, generation/rollouts)."""
    import copy

    from clipo_megatron.core import CLIPOConfig
    from clipo_megatron.core.contrastive_loss import l2_normalize
    from clipo_megatron.megatron.clipo_step import clipo_step
    from clipo_megatron.megatron.head_trainer import HeadTrainer
    from clipo_megatron.runner.passes import logprob_and_pool

    model, ids, mask, _, (_, ref_pooled, _) = single
    ids, mask = ids.clone(), mask.clone()
    start = int(mask[5].nonzero().min())  # row 5 (group 1) answers nothing after its prompt
    ids[5, start:], mask[5] = 0, False
    _, pooled, empty, _ = logprob_and_pool(model, ids, mask, 8, shared_prefix=False)
    keep = torch.arange(12) != 5
    assert empty.tolist() == (~keep).tolist() and float(pooled[5].abs().max()) == 0.0
    torch.testing.assert_close(pooled[keep], ref_pooled[keep], **TOL)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(pooled.shape[1], 16, bias=False)

        def forward(self, x):
            return l2_normalize(self.proj(x))

    torch.manual_seed(0)
    head = Head()
    correct = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1, 0]).float()  # group 1 keeps 2 + 1
    gids, sids = torch.arange(3).repeat_interleave(4), torch.arange(12)
    cfg = CLIPOConfig(embed_dim=16)
    ref_trainer = HeadTrainer(copy.deepcopy(head), cfg)
    out = clipo_step(HeadTrainer(head, cfg), pooled, correct, gids, sids, step=0, empty=empty)
    ref = clipo_step(ref_trainer, pooled[keep], correct[keep], gids[keep], sids[keep], step=0)
    assert float(out.rewards[5]) == 0.0 and out.metrics["clipo/empty_responses"] == 1.0
    torch.testing.assert_close(out.rewards[keep], ref.rewards, rtol=0, atol=1e-6)
    assert float(ref.rewards[4:7].abs().max()) > 0  # group 1, without row 5, still ranks
    torch.testing.assert_close(head.proj.weight, ref_trainer.head.proj.weight, rtol=0, atol=1e-6)
