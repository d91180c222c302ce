# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own custom autograd Function under `emulated_cuda()`: `DistributedLogprob` (via
`from_parallel_logits_to_logprobs`, what its loss and get_logprobs call) saves an intermediate
and a mask, all-reduces over the TP group and scatters in backward. Needs NEMO_RL_SRC."""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

from clipo_testkit.emulated_cuda import (
    EmulatedDeviceError,
    EmulatedNondeterminismError,
    emulated_cuda,
    is_on_device,
)

pytestmark = [pytest.mark.nemo_rl, pytest.mark.device_rules]


def _model_utils():
    src = os.environ.get("NEMO_RL_SRC")
    if not src or not os.path.isfile(os.path.join(src, "nemo_rl", "__init__.py")):
        pytest.skip(f"NEMO_RL_SRC is missing: set it to a NeMo-RL checkout (got {src!r})")
    if src not in sys.path:
        sys.path.insert(0, src)
    try:
        return importlib.import_module("nemo_rl.distributed.model_utils")
    except ImportError as e:
        pytest.skip(f"NEMO_RL_SRC={src} does not import here: {e}")


def test_distributed_logprob_on_the_emulated_device(mcore_single_process):
    import torch.distributed as dist

    mu = _model_utils()
    gen = torch.Generator().manual_seed(0)
    logits, target = (
        torch.randn(2, 6, 11, generator=gen),
        torch.randint(0, 11, (2, 6), generator=gen),
    )

    def run(lg, tg):
        lg = lg.clone().requires_grad_(True)
        lp = mu.from_parallel_logits_to_logprobs(lg, tg, 0, 11, dist.group.WORLD)
        lp.sum().backward()
        return lp.detach(), lg.grad

    ref = run(logits, target)
    nxt = target[:, 1:].unsqueeze(-1)  # naive: log_softmax at the next token
    naive = torch.log_softmax(logits[:, :-1], -1).gather(-1, nxt).squeeze(-1)
    torch.testing.assert_close(ref[0], naive, rtol=0, atol=1e-6)
    with emulated_cuda():  # its backward scatter_add_s: CUDA atomics, refused unless deterministic
        with pytest.raises(EmulatedNondeterminismError, match="scatter_add"):
            run(logits.cuda(), target.cuda())
        with pytest.raises(EmulatedDeviceError):
            run(logits.cuda(), target)  # host targets beside device logits
    with emulated_cuda(strict_order=False):
        got = run(logits.cuda(), target.cuda())
        assert is_on_device(got[0]) and is_on_device(got[1])
    assert torch.equal(ref[0], got[0].cpu()) and torch.equal(ref[1], got[1].cpu())
