# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One full CLIPO GRPO step through this integration's code path, on CPU, on a tiny Megatron GPTModel.

Real: megatron-core GPTModel (CPU spec), the worker mixin (`ClipoWorkerMixin.get_logprobs`: iterator tee +
final-norm hook pooling in the logprob forward, `clipo_head_step` with engineer A's HeadTrainer), the
advantage seam (`ClipoAdvantageEstimator` + NeMo-RL-semantics GRPO estimator), the verifier (math-verify on
the responses), `ObjectiveLossFn` (GMPO) in the LossFunction protocol, head checkpoint save/load.
Mocked (need a cluster / NeMo-RL): vLLM generation (fixed responses), Ray and NeMo-RL's Policy (a
stand-in that, like `ClipoPolicy`, tags rows, sorts them by length as sequence packing does and restores
the order), and NeMo-RL's Megatron worker base (`FakeMegatronWorker`: reads microbatches from its module's
`get_microbatch_iterator`, runs the model, returns logprobs; `train` runs the loss and an SGD step).
"""

from __future__ import annotations

import types

import pytest
import torch

from clipo_megatron.nemo_rl.advantage_estimator import ClipoAdvantageEstimator, ClipoRunState
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.data import score_batch
from clipo_megatron.nemo_rl.head_step import collect_head_step
from clipo_megatron.nemo_rl.loss_functions import ObjectiveLossFn
from clipo_megatron.nemo_rl.worker import (
    SAMPLE_IDX_KEY,
    ClipoWorkerMixin,
    ClipoWorkerState,
    WorkerPassState,
)
from clipo_testkit.tiny_models import tiny_arch
from tests.nemo_rl.group_estimator import GroupNormalizedEstimator

pytestmark = [pytest.mark.mcore, pytest.mark.slow]


def _microbatches(data, mbs):
    n = len(data["input_ids"])
    it = ({"data_dict": {k: v[i : i + mbs] for k, v in data.items()}} for i in range(0, n, mbs))
    return it, (n + mbs - 1) // mbs


FAKE_WORKER_MODULE = types.SimpleNamespace(get_microbatch_iterator=_microbatches)


class FakeMegatronWorker:
    """Stand-in for NeMo-RL's MegatronPolicyWorkerImpl (same get_logprobs contract)."""

    def __init__(self, model):
        self.model = model

    def _logprobs(self, input_ids):
        b, s = input_ids.shape
        pos = torch.arange(s).unsqueeze(0).expand(b, s)
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1).view(1, 1, s, s)
        logits = self.model(input_ids, pos, causal)  # [b, s, V]
        lp = (
            torch.log_softmax(logits.float(), -1)[:, :-1]
            .gather(2, input_ids[:, 1:].unsqueeze(2))
            .squeeze(2)
        )
        return torch.cat([torch.zeros(b, 1), lp], 1)  # [b, s], position 0 = 0 (NeMo-RL convention)

    def get_logprobs(self, *, data, micro_batch_size=None, **_):
        it, _n = FAKE_WORKER_MODULE.get_microbatch_iterator(data, micro_batch_size or 2)
        with torch.no_grad():
            return {
                "logprobs": torch.cat([self._logprobs(mb["data_dict"]["input_ids"]) for mb in it])
            }

    def train(self, data, loss_fn, lr=1e-2):
        mask = data["token_mask"][:, 1:] * data["sample_mask"].unsqueeze(1)
        lp = self._logprobs(data["input_ids"])[:, 1:]
        loss, metrics = loss_fn(lp, data, (mask.sum(1) > 0).sum(), mask.sum())
        self.model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in self.model.parameters():
                if p.grad is not None:
                    p -= lr * p.grad
        return loss.detach(), metrics


class Worker(ClipoWorkerMixin, FakeMegatronWorker):
    _clipo_iterator_module = FAKE_WORKER_MODULE


def _head(hidden, d):
    from clipo_megatron.megatron.head import build_contrastive_head
    from clipo_megatron.runner.model.model_builder import transformer_config

    torch.manual_seed(3)
    cfg = transformer_config(tiny_arch(hidden_size=hidden, num_layers=1, ffn_hidden_size=64))
    return build_contrastive_head(cfg, input_size=hidden, embed_dim=d)


def test_one_clipo_grpo_step(mcore_single_process, tmp_path):
    from clipo_megatron.megatron.parallel import ParallelGroups
    from clipo_megatron.runner.model.model_builder import build_gpt_model

    torch.manual_seed(0)
    arch = tiny_arch(vocab_size=64, hidden_size=32, ffn_hidden_size=64, tie_embeddings=True)
    model = build_gpt_model(arch)
    cfg = ClipoNemoRLConfig.from_dict({"method": {"embed_dim": 16, "temperature": 0.1}})
    worker = Worker(model)
    worker._clipo = WorkerPassState(
        ParallelGroups(), head_state=ClipoWorkerState(cfg, _head(32, 16))
    )
    model_keys = set(model.state_dict())

    # --- rollouts (mocked generation): 3 prompts x 4 responses, ragged lengths; rewards from math-verify
    answers = {0: "4", 1: "9", 2: "7"}
    said = {
        0: ["4", "4", "5", "4"],
        1: ["9", "1", "9", "9"],
        2: ["7", "7", "7", "7"],
    }  # group 2: no negative
    gen = torch.Generator().manual_seed(1)
    rows, prompts, texts, truths = [], [], [], []
    for g in (0, 1, 2):
        prompt = torch.randint(1, 64, (3 + g,), generator=gen)
        for k, a in enumerate(said[g]):
            resp = torch.randint(1, 64, (4 + (k + g) % 3,), generator=gen)
            rows.append((prompt, resp))
            prompts.append(torch.nn.functional.pad(prompt, (0, 5 - len(prompt))))
            texts.append(f"so the answer is \\boxed{{{a}}}")
            truths.append(answers[g])
    order = torch.randperm(12, generator=gen)  # rollouts come back interleaved
    rows = [rows[i] for i in order]
    prompt_ids = torch.stack([prompts[i] for i in order])  # [12, 5]
    rewards = torch.tensor(
        score_batch([texts[i] for i in order], [truths[i] for i in order])
    )  # [12]
    s = max(len(p) + len(r) for p, r in rows)
    input_ids = torch.zeros(12, s, dtype=torch.long)
    token_mask = torch.zeros(12, s)
    for i, (p, r) in enumerate(rows):
        input_ids[i, : len(p) + len(r)] = torch.cat([p, r])
        token_mask[i, len(p) : len(p) + len(r)] = 1
    lengths = (input_ids > 0).sum(1)
    data = {
        "input_ids": input_ids,
        "input_lengths": lengths,
        "token_mask": token_mask,
        "sample_mask": torch.ones(12),
    }

    # --- reference: pooled response hidden states from a plain forward with a hook (what CLIPO should see)
    seen = []
    h = model.decoder.final_layernorm.register_forward_hook(
        lambda _m, _i, o: seen.append(o.detach())
    )
    with torch.no_grad():
        worker._logprobs(input_ids)
    h.remove()
    hid = seen[0].transpose(0, 1)  # [12, S, H]
    ref_pooled = (hid * token_mask.unsqueeze(2)).sum(1) / token_mask.sum(1, keepdim=True)

    # --- policy logprob pass (ClipoPolicy stand-in: tag rows, sort by length like packing, restore)
    perm = torch.argsort(lengths, descending=True, stable=True)
    tagged = {**{k: v[perm] for k, v in data.items()}, SAMPLE_IDX_KEY: torch.arange(12)[perm]}
    prev = torch.empty(12, s)
    prev[perm] = worker.get_logprobs(data=tagged, micro_batch_size=5)["logprobs"]
    ref_lp = worker.get_logprobs(data=data, micro_batch_size=5)[
        "logprobs"
    ]  # reference pass: no capture
    torch.testing.assert_close(prev, ref_lp, rtol=0, atol=1e-6)
    cap = torch.empty_like(ref_pooled)
    cap[worker._clipo.head_state.rows] = worker._clipo.head_state.pooled
    torch.testing.assert_close(
        cap, ref_pooled, rtol=0, atol=1e-5
    )  # captured in the logprob forward

    # --- advantages with contrastive rewards (the grpo_train seam)
    state = ClipoRunState()
    head_before = worker._clipo.head_state.head.proj.weight.detach().clone()
    expected_trainer = ClipoWorkerState(
        cfg, _head(32, 16)
    )  # an independent head step on the reference pooling
    expected_trainer.record(torch.arange(12), ref_pooled)
    est = ClipoAdvantageEstimator(
        GroupNormalizedEstimator(use_leave_one_out_baseline=False),
        lambda c, g, st: collect_head_step(
            [worker.clipo_head_step(correct=c, group_ids=g, step=st)], 12
        ),
        cfg,
        state,
    )
    mask = token_mask * data["sample_mask"].unsqueeze(1)
    adv = est.compute_advantage(prompt_ids=prompt_ids, rewards=rewards, mask=mask)
    exp = expected_trainer.head_step(
        rewards >= 0.5, torch.unique(prompt_ids, dim=0, return_inverse=True)[1], 0
    )
    r_cl = torch.empty(12)
    r_cl[exp["sample_idx"]] = exp["rewards"]
    assert (r_cl < 0).sum() >= 2 and (
        r_cl[rewards == 0] == 0
    ).all()  # anchors of groups 0, 1 penalised
    ref_adv = GroupNormalizedEstimator(use_leave_one_out_baseline=False).compute_advantage(
        prompt_ids, rewards + r_cl, mask
    )
    torch.testing.assert_close(adv, ref_adv, rtol=0, atol=1e-5)
    assert not torch.equal(
        worker._clipo.head_state.head.proj.weight, head_before
    )  # head updated once
    assert state.step == 1 and cfg.policy_updates_at(state.trained_step)
    assert (
        set(model.state_dict()) == model_keys
    )  # the head never enters the model (HF export / refit)

    # --- policy update with GMPO (LossFunction protocol), then the head checkpoint round trip
    train_data = {**data, "prev_logprobs": prev, "generation_logprobs": prev, "advantages": adv}
    before = [p.detach().clone() for p in model.parameters()]
    loss, metrics = worker.train(train_data, ObjectiveLossFn("gmpo"))
    assert torch.isfinite(loss) and metrics["num_valid_samples"] == 12
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    worker._clipo.head_state.save(str(tmp_path), extra=state.state_dict())
    again = ClipoWorkerState(cfg, _head(32, 16))
    assert again.load(str(tmp_path)) == {"step": 1}
    torch.testing.assert_close(
        again.head.proj.weight, worker._clipo.head_state.head.proj.weight, rtol=0, atol=0
    )
