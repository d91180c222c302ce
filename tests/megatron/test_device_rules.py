# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO's parallel pieces under CUDA's device rules, on CPU: a world of 2 gloo processes, every
group declared NCCL, tensors on the emulated device (`clipo_testkit.emulated_cuda`), each check
against one host process (`clipo_testkit.parallel_checks`, the same checks the GPU kit runs).

What each check caught before its fix (issue 16):
  gather   the DP gather's sizes and padding were host tensors sent through NCCL (item 3)
  step_dp  labels / ids stayed on the host while the rows were on the device (item 2)
  head_tp  the TP head inherited sequence parallelism and grad-accumulation fusion (item 4)
  pool_tp  TP replicas pooled with atomic index_add, not bit-identical on a GPU (item 5)
  ddp      (issue 23) Megatron-Core's DDP + optimizer over DP = 2: with an alias node per
           emulated op its grad hooks never fired, grad norm 0, the step moved nothing
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")

from clipo_testkit import parallel_checks  # noqa: E402

from .dist_utils import run_distributed  # noqa: E402

pytestmark = [pytest.mark.mcore, pytest.mark.multiprocess]
WORLD = 2


def _worker(rank, world):
    from clipo_megatron.megatron.parallel import ensure_model_parallel
    from clipo_testkit.emulated_cuda import emulated_cuda

    ensure_model_parallel(world, 1)  # the TP head's ColumnParallelLinear reads parallel_state
    with emulated_cuda():
        return parallel_checks.run_checks(rank, world, "cuda")


@pytest.fixture(scope="module")
def compared():
    return parallel_checks.compare(run_distributed(_worker, WORLD, timeout=240), WORLD)


@pytest.mark.parametrize("check", parallel_checks.CHECKS)
def test_check_matches_one_host_process_on_the_emulated_device(compared, check):
    diffs, failures = compared
    mine = [f for f in failures if f.split(":")[0].startswith(check)]
    assert not mine, "\n".join(mine)
    assert diffs[check] < float("inf")


def test_tp_replicas_pool_bit_identically(compared):
    diffs, failures = compared
    assert diffs["pool_tp_replicas"] == 0.0, failures


def _ddp_batch():
    import torch

    from clipo_testkit.tiny_models import TINY_ARCH

    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, TINY_ARCH.vocab_size, (2 * WORLD, 10), generator=gen)
    return ids, torch.arange(10).expand(2 * WORLD, 10).contiguous()


def _ddp_worker(rank, world):
    """One DP rank of NeMo-RL's training step on the emulated device: Megatron-Core's DDP (grad
    hooks, the grad all-reduce over a group declared NCCL) and optimizer (clipping, SGD)."""
    import torch
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    from clipo_megatron.megatron.parallel import ensure_model_parallel
    from clipo_megatron.runner.model.model_builder import build_gpt_model
    from clipo_testkit.emulated_cuda import emulated_cuda, is_on_device
    from clipo_testkit.tiny_models import TINY_ARCH

    ensure_model_parallel(1, 1)  # DP = world
    ids, pos = _ddp_batch()
    rows = slice(2 * rank, 2 * rank + 2)
    with emulated_cuda():
        torch.manual_seed(0)
        model = build_gpt_model(TINY_ARCH).cuda()
        ddp = DistributedDataParallel(model.config, DistributedDataParallelConfig(), model)
        cfg = OptimizerConfig(optimizer="sgd", lr=0.5, clip_grad=0.05, weight_decay=0.0)
        opt = get_megatron_optimizer(cfg, [ddp])
        ddp.zero_grad_buffer()
        ddp(ids[rows].cuda(), pos[rows].cuda(), None).float().logsumexp(-1).mean().backward()
        ddp.finish_grad_sync()
        ok, norm, _ = opt.step()
        on_device = all(is_on_device(p) for p in model.parameters())
    params = [p.detach().cpu().tolist() for p in model.parameters()]
    grads = [p.main_grad.cpu().tolist() for p in model.parameters()]  # synced, then clipped
    return {"ok": ok and on_device, "norm": norm, "params": params, "grads": grads}


def test_ddp_step_over_dp2_equals_one_host_process(mcore_single_process):
    """DP = 2 on the emulated device against one host process over the whole batch: the mean of
    the two ranks' mean losses is the whole batch's mean, so grads, norm and step agree."""
    import torch

    from clipo_megatron.runner.model.model_builder import build_gpt_model
    from clipo_testkit.tiny_models import TINY_ARCH

    res = run_distributed(_ddp_worker, WORLD, timeout=240)
    ids, pos = _ddp_batch()
    torch.manual_seed(0)
    host = build_gpt_model(TINY_ARCH)
    host(ids, pos, None).float().logsumexp(-1).mean().backward()
    norm = torch.cat([p.grad.double().flatten() for p in host.parameters()]).norm().item()
    for p in host.parameters():
        p.grad.mul_(0.05 / (norm + 1.0e-6))
    torch.optim.SGD(host.parameters(), lr=0.5, momentum=0.9).step()  # mcore's sgd_momentum
    for r in range(WORLD):
        assert res[r]["ok"] and res[r]["norm"] == pytest.approx(norm, rel=1e-5)
        for got, want in zip(res[r]["grads"], host.parameters(), strict=True):
            torch.testing.assert_close(torch.tensor(got), want.grad, rtol=1e-5, atol=1e-10)
        for got, want in zip(res[r]["params"], host.parameters(), strict=True):
            # SGD (Adam's lr * g / (|g| + eps) would amplify the grads' rounding near eps)
            torch.testing.assert_close(torch.tensor(got), want.detach(), rtol=0, atol=3.6e-7)
