# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The NeMo-RL worker's CLIPO calls on the (emulated) GPU, as the GPU worker extension runs them.

`ClipoWorkerMixin` over a stand-in worker whose `get_logprobs` reads its microbatches from a
`get_microbatch_iterator` that moves each microbatch dict to "cuda" (NeMo-RL's
`make_processed_microbatch_iterator` does `data_dict.to("cuda")`), with the model and the head
on the device; the driver's labels and group ids arrive as host tensors (Ray). Under
`emulated_cuda()` a host/device mix-up raises as on a GPU. Padded and packed (THD with
`cu_seqlens_padded`) microbatches; the rewards must equal the all-host run.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from clipo_megatron.megatron.parallel import ParallelGroups
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.worker import (
    SAMPLE_IDX_KEY,
    ClipoWorkerMixin,
    ClipoWorkerState,
    WorkerPassState,
)
from clipo_testkit.emulated_cuda import emulated_cuda, is_on_device

pytestmark = pytest.mark.mcore

B, S, H = 12, 10, 8
CFG = ClipoNemoRLConfig.from_dict({"method": {"embed_dim": 6, "seed": 7}})


def _batch():
    gen = torch.Generator().manual_seed(4)
    lengths = torch.randint(5, S + 1, (B,), generator=gen)
    mask = torch.zeros(B, S, dtype=torch.bool)
    for i in range(B):
        mask[i, 2 : int(lengths[i])] = True
    return {
        "hidden_in": torch.randn(B, S, H, generator=gen),  # stands in for the token ids
        "token_mask": mask,
        "input_lengths": lengths,
        SAMPLE_IDX_KEY: torch.arange(B),
    }


def get_microbatch_iterator(data, mbs, *, packed, device):
    """NeMo-RL's seam: (iterator, n). Microbatches are sorted by length (NeMo-RL sorts when it
    packs), moved to `device`, and packed ones carry `cu_seqlens_padded`."""
    order = torch.argsort(data["input_lengths"], descending=True, stable=True)

    def it():
        for k in range(0, B, mbs):
            rows = order[k : k + mbs]
            mb = {key: v[rows].to(device) for key, v in data.items()}
            cu = None
            if packed:
                slots = (mb["input_lengths"] + 3) // 4 * 4  # padded to a multiple of 4
                cu = torch.cat([slots.new_zeros(1), torch.cumsum(slots, 0)]).to(torch.int32)
            yield SimpleNamespace(data_dict=mb, cu_seqlens_padded=cu)

    return it(), (B + mbs - 1) // mbs


class _Model(torch.nn.Module):
    """Hidden states -> final norm -> 'logprobs': enough for the final-norm hook."""

    def __init__(self):
        super().__init__()
        self.decoder = torch.nn.Module()
        self.decoder.final_layernorm = torch.nn.LayerNorm(H)

    def forward(self, mb):
        x = mb.data_dict["hidden_in"]  # [b, S, H]
        if mb.cu_seqlens_padded is None:
            return self.decoder.final_layernorm(x.transpose(0, 1))  # [S, b, H] (sbd)
        cu, lengths = mb.cu_seqlens_padded, mb.data_dict["input_lengths"]
        stream = torch.zeros(int(cu[-1]), 1, H, device=x.device)  # [T, 1, H] (THD)
        for i in range(x.shape[0]):
            stream[int(cu[i]) : int(cu[i]) + int(lengths[i]), 0] = x[i, : int(lengths[i])]
        return self.decoder.final_layernorm(stream)


class _Worker:
    """What the mixin needs of NeMo-RL's worker: `model` and a `get_logprobs` over the seam."""

    packed = False
    device = "cpu"

    def __init__(self):
        torch.manual_seed(0)
        self.model = _Model().to(self.device)

    def get_logprobs(self, *, data, micro_batch_size=None):
        it, _ = self._clipo_iterator_module.get_microbatch_iterator(
            data, micro_batch_size or 5, packed=self.packed, device=self.device
        )
        return [self.model(mb).sum() for mb in it]


class _ClipoWorker(ClipoWorkerMixin, _Worker):
    _clipo_iterator_module = sys.modules[__name__]


def _head():
    torch.manual_seed(1)
    return torch.nn.Linear(H, 6, bias=False)


def _run(packed: bool, device: str):
    w = _ClipoWorker.__new__(_ClipoWorker)
    w.packed, w.device = packed, device
    _Worker.__init__(w)
    w._clipo = WorkerPassState(
        ParallelGroups(), head_state=ClipoWorkerState(CFG, _head().to(device))
    )
    data = _batch()
    w.get_logprobs(data=data)
    correct = torch.tensor([1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1])  # from the driver: host
    groups = torch.arange(3).repeat(4)
    out = w.clipo_head_step(correct=correct, group_ids=groups, step=0)
    return out, w._clipo.head_state.head.weight.detach()


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed_thd"])
def test_worker_clipo_calls_on_the_emulated_device_equal_the_host_run(packed):
    ref, w_ref = _run(packed, "cpu")
    with emulated_cuda():
        out, w_dev = _run(packed, "cuda")
        assert is_on_device(w_dev)
        # Ray carries host tensors back to the driver.
        assert not is_on_device(out["rewards"]) and not is_on_device(out["sample_idx"])
        w_dev = w_dev.cpu()
    order = torch.argsort(out["sample_idx"])
    ref_order = torch.argsort(ref["sample_idx"])
    torch.testing.assert_close(
        out["rewards"][order], ref["rewards"][ref_order], rtol=1e-6, atol=1e-6
    )
    torch.testing.assert_close(w_dev, w_ref, rtol=1e-6, atol=1e-6)
    assert (ref["rewards"] != 0).any()
