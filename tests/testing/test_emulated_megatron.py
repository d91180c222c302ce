# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Megatron-Core's own layers under `emulated_cuda()`: its custom autograd Functions carry the
device tags (the output layer's `LinearWithGradAccumulationAndAsyncCommunication` met a host
input under no_grad before testing/emulated_autograd.py), the numbers equal the host run bit for
bit, a planted host tensor raises, and Megatron-Core's FP32 optimizer steps (its grad clipping
asserts `param.grad.type() == 'torch.cuda.FloatTensor'`)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")

from clipo_testkit.emulated_cuda import (  # noqa: E402
    EmulatedDeviceError,
    emulated_cuda,
    is_on_device,
)
from clipo_testkit.tiny_models import TINY_ARCH as ARCH  # noqa: E402

pytestmark = [pytest.mark.mcore, pytest.mark.device_rules]
SEQ, B = 12, 3


def _model():
    from clipo_megatron.runner.model.model_builder import build_gpt_model

    torch.manual_seed(0)
    return build_gpt_model(ARCH)


def _batch():
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, ARCH.vocab_size, (B, SEQ), generator=gen)
    return ids, torch.arange(SEQ).expand(B, SEQ).contiguous()


def _forward_backward(model, ids, pos):
    """(logits under no_grad as get_logprobs runs, logits with grad, {name: grad})."""
    with torch.no_grad():
        eval_logits = model(ids, pos, None)
    logits = model(ids, pos, None)
    logits.float().logsumexp(-1).mean().backward()
    return eval_logits, logits.detach(), {n: p.grad for n, p in model.named_parameters()}


def test_column_parallel_linear_carries_tags(mcore_single_process):
    from megatron.core.tensor_parallel import ColumnParallelLinear

    from clipo_megatron.runner.model.model_builder import transformer_config

    def layer():
        torch.manual_seed(0)
        return ColumnParallelLinear(
            16, 8, config=transformer_config(ARCH), init_method=torch.nn.init.normal_, bias=True
        )

    x = torch.randn(SEQ, B, 16)

    def run(lay, inp):
        leaf = inp.clone().requires_grad_(True)  # what make_viewless_tensor hands the layer
        with torch.no_grad():
            y0, _ = lay(leaf)
        y, _ = lay(leaf)
        (y * y).sum().backward()
        return y0, y.detach(), leaf.grad, lay.weight.grad, lay.bias.grad

    ref = run(layer(), x)
    with emulated_cuda():
        dev = layer().cuda()
        got = run(dev, x.cuda())
        assert all(is_on_device(t) for t in got)
        with pytest.raises(EmulatedDeviceError, match="matmul"):
            dev(x)  # a host input into the device layer
    for r, g in zip(ref, got, strict=True):
        assert torch.equal(r, g.cpu())


def test_gpt_model_forward_backward_equal_the_host_run(mcore_single_process):
    ids, pos = _batch()
    ref = _forward_backward(_model(), ids, pos)
    with emulated_cuda():
        dev = _model().cuda()
        got = _forward_backward(dev, ids.cuda(), pos.cuda())
        assert is_on_device(got[0]) and is_on_device(got[1])
        assert all(is_on_device(g) for g in got[2].values())
    assert torch.equal(ref[0], got[0].cpu()) and torch.equal(ref[1], got[1].cpu())
    assert ref[2].keys() == got[2].keys()
    for name, g in ref[2].items():
        assert torch.equal(g, got[2][name].cpu()), name


def test_gpt_model_planted_host_tensor_raises(mcore_single_process):
    model, (ids, pos) = _model(), _batch()
    with emulated_cuda():
        dev = model.cuda()
        with pytest.raises(EmulatedDeviceError, match="same device"):
            dev(ids, pos.cuda(), None)  # host token ids into the device embedding
        handle = dev.decoder.final_layernorm.register_forward_hook(lambda m, i, o: o.cpu())
        with torch.no_grad(), pytest.raises(EmulatedDeviceError, match="matmul"):
            dev(ids.cuda(), pos.cuda(), None)  # host hidden states into the output layer
        handle.remove()


def test_megatron_fp32_optimizer_step(mcore_single_process):
    """Megatron-Core's FP32Optimizer (torch Adam, grad clipping) on the emulated device, against
    a hand reference: norm over all grads, grads * clip / (norm + 1e-6), torch Adam."""
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.optimizer.clip_grads import clip_grad_by_total_norm_fp32
    from megatron.core.optimizer.optimizer import FP32Optimizer

    ids, pos = _batch()
    clip, lr = 0.05, 1e-2
    host = _model()
    _forward_backward(host, ids, pos)
    grads = [p.grad for p in host.parameters()]
    norm = torch.cat([g.double().flatten() for g in grads]).norm().item()
    with pytest.raises(AssertionError):  # on the host the type check refuses (CPU runs patch it)
        clip_grad_by_total_norm_fp32(list(host.parameters()), clip, norm)
    for g in grads:
        g.mul_(clip / (norm + 1.0e-6))
    clipped = [g.clone() for g in grads]
    torch.optim.Adam(host.parameters(), lr=lr).step()
    with emulated_cuda():
        dev = _model().cuda()
        _forward_backward(dev, ids.cuda(), pos.cuda())
        assert {p.grad.type() for p in dev.parameters()} == {"torch.cuda.FloatTensor"}
        cfg = OptimizerConfig(optimizer="adam", lr=lr, clip_grad=clip)
        opt = FP32Optimizer(torch.optim.Adam(dev.parameters(), lr=lr), cfg, None)
        ok, grad_norm, _ = opt.step()
        assert ok and is_on_device(next(dev.parameters()))
    assert grad_norm == pytest.approx(norm, rel=1e-6)
    for g, p in zip(clipped, dev.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), g, rtol=1e-5, atol=1e-9)
    for ph, pd in zip(host.parameters(), dev.parameters(), strict=True):
        torch.testing.assert_close(pd.detach().cpu(), ph.detach(), rtol=0, atol=1e-7)


@pytest.mark.parametrize("distributed", [False, True], ids=["optimizer", "distrib_optimizer"])
def test_megatron_ddp_and_optimizer_step(mcore_single_process, distributed):
    """NeMo-RL's training path: Megatron-Core's DDP (grads into main_grad through its hooks on
    AccumulateGrad, the grad sync over a group declared NCCL) and `get_megatron_optimizer`
    (torch Adam, grad clipping; the distributed optimizer's param buffers and type checks),
    against the host hand reference of the test above."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    ids, pos = _batch()
    clip, lr = 0.05, 1e-2
    host = _model()
    _forward_backward(host, ids, pos)
    grads = [p.grad for p in host.parameters()]
    norm = torch.cat([g.double().flatten() for g in grads]).norm().item()
    for g in grads:
        g.mul_(clip / (norm + 1.0e-6))
    torch.optim.Adam(host.parameters(), lr=lr).step()
    with emulated_cuda():
        model = _model().cuda()
        ddp_cfg = DistributedDataParallelConfig(use_distributed_optimizer=distributed)
        ddp = DistributedDataParallel(model.config, ddp_cfg, model)
        cfg = OptimizerConfig(
            optimizer="adam",
            lr=lr,
            clip_grad=clip,
            weight_decay=0.0,
            use_distributed_optimizer=distributed,
        )
        opt = get_megatron_optimizer(cfg, [ddp])
        ddp.zero_grad_buffer()
        ddp(ids.cuda(), pos.cuda(), None).float().logsumexp(-1).mean().backward()
        ddp.finish_grad_sync()
        assert all(is_on_device(p.main_grad) for p in model.parameters())
        ok, grad_norm, _ = opt.step()
        assert ok and all(is_on_device(p) for p in model.parameters())
    assert grad_norm == pytest.approx(norm, rel=1e-6)
    for ph, pd in zip(host.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pd.detach().cpu(), ph.detach(), rtol=0, atol=1e-7)
