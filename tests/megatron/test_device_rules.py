# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO's parallel pieces under CUDA's device rules, on CPU: a world of 2 gloo processes, every
group declared NCCL, tensors on the emulated device (`testing.emulated_cuda`), each check
against one host process (`testing.parallel_checks`, the same checks the GPU kit runs).

What each check caught before its fix (issue 16):
  gather   the DP gather's sizes and padding were host tensors sent through NCCL (item 3)
  step_dp  labels / ids stayed on the host while the rows were on the device (item 2)
  head_tp  the TP head inherited sequence parallelism and grad-accumulation fusion (item 4)
  pool_tp  TP replicas pooled with atomic index_add, not bit-identical on a GPU (item 5)
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")

from clipo_megatron.testing import parallel_checks  # noqa: E402

from .dist_utils import run_distributed  # noqa: E402

pytestmark = [pytest.mark.mcore, pytest.mark.multiprocess]
WORLD = 2


def _worker(rank, world):
    from clipo_megatron.megatron.parallel import ensure_model_parallel
    from clipo_megatron.testing.emulated_cuda import emulated_cuda

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
