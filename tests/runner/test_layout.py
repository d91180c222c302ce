# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner's `Layout`: what one process gets, and the two schedules agreeing.

The plain loop (one stage) and Megatron-Core's schedule (several stages; here its
PP = 1 form, `forward_backward_no_pipelining`, in one process) must run every
micro-batch in order and leave the same gradients: Megatron divides each loss by the
number of micro-batches, the layout scales it back (our micro-batch losses already sum
to the batch loss). The TP = 2 / PP = 2 passes against one process are in
test_shared_prefix.py and test_model_parallel_runner.py.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.mcore, pytest.mark.runner]


def test_one_process_layout_is_plain(mcore_single_process):
    from clipo_megatron.runner.layout import Layout
    from clipo_megatron.runner.model.policy_passes import target_logprobs

    lay = Layout.init(1, 1)
    assert (lay.groups.tp, lay.groups.pp, lay.groups.dp) == (None, None, None)
    assert not lay.model_parallel and not lay.pipelined and lay.is_last_stage
    logits, targets = torch.randn(2, 3, 7), torch.randint(0, 7, (2, 3))
    assert torch.equal(lay.target_logprobs(logits, targets), target_logprobs(logits, targets))
    obj = {"x": torch.ones(2)}
    assert lay.broadcast(obj) is obj  # one stage: nothing to send
    named = {"w": torch.ones(1), "layer._extra_state": None}
    assert lay.full_state(named, arch=None) == {"w": named["w"]}


def _update_grads(model, ids, mask, adv, schedule):
    """Grads of sum_i adv_i * sum_t lp_it (as micro-batch losses that sum to it), and the infos."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import SAMPLE_IDX_KEY
    from clipo_megatron.runner.layout import Layout
    from clipo_megatron.runner.micro_batches import forward, rollout_logprobs

    lay = Layout()
    micro = lay.micro_batches(ids, mask, 5, shared_prefix=True)  # 3 micro-batches
    assert len(micro) == 3

    def forward_step(it, net):
        mb = next(it)

        def loss_func(logits):
            lp = rollout_logprobs(logits, mb, lay.target_logprobs, ids.shape[1])  # [b, S]
            rows = mb[SAMPLE_IDX_KEY]
            loss = -(adv[rows, None] * torch.where(mask[rows], lp, 0.0)).sum()
            return loss, {"rows": rows.tolist(), "loss": float(loss.detach())}

        return forward(net, mb), loss_func

    model.train()
    model.zero_grad(set_to_none=True)
    infos = schedule(model, micro, forward_step)
    return {k: p.grad.clone() for k, p in model.named_parameters()}, infos


def test_megatron_schedule_equals_the_plain_loop(mcore_single_process):
    from clipo_megatron.runner import layout as layout_mod
    from clipo_megatron.runner.policy import build_policy
    from tests.runner.test_shared_prefix import _batch, _hf

    model, _ = build_policy(_hf())
    ids, mask, adv = _batch()
    plain, plain_infos = _update_grads(
        model,
        ids,
        mask,
        adv,
        lambda m, mbs, f: layout_mod.Layout().schedule(m, mbs, f, forward_only=False),
    )
    mega, mega_infos = _update_grads(
        model,
        ids,
        mask,
        adv,
        lambda m, mbs, f: layout_mod._megatron_schedule(m, mbs, f, False, iter(mbs)),
    )
    assert [i["rows"] for i in plain_infos] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert mega_infos == plain_infos  # every micro-batch, in order, the same losses
    # loss * 3 / 3 through Megatron's division: a few ulp (fp32)
    for k, g in plain.items():
        torch.testing.assert_close(mega[k], g, rtol=1e-6, atol=1e-7, msg=k)
    assert float(plain["output_layer.weight"].abs().sum()) > 1e-3  # a real gradient
