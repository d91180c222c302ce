# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`broadcast_from_last_stage`, the one pipeline broadcast: tensor and object form, on the host
and on the emulated device over a group declared NCCL (the receive buffers live on the rows'
device, or NCCL refuses them)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")

from .dist_utils import run_distributed  # noqa: E402


def _stage_values(rank: int):
    rows = torch.arange(6, dtype=torch.float32).view(3, 2) * (rank + 1)  # [3, 2], stage-specific
    return rows, {"loss": 0.5 * (rank + 1), "rows": rows}


def test_one_stage_returns_the_value_itself():
    from clipo_megatron.megatron.gather import broadcast_from_last_stage

    rows, obj = _stage_values(0)
    assert broadcast_from_last_stage(obj) is obj
    assert broadcast_from_last_stage(rows, shape=(3, 2), dtype=torch.float32) is rows


def _worker(rank, world, emulate):
    import contextlib

    import torch.distributed as dist

    from clipo_megatron.megatron.gather import broadcast_from_last_stage
    from clipo_testkit.emulated_cuda import emulated_cuda, is_on_device

    pp = dist.new_group(list(range(world)))
    last = rank == world - 1
    dev = "cuda" if emulate else "cpu"
    with emulated_cuda() if emulate else contextlib.nullcontext():
        rows, obj = _stage_values(rank)
        rows = rows.to(dev)
        t = broadcast_from_last_stage(
            rows if last else None, pp_group=pp, shape=(3, 2), dtype=torch.float32, device=dev
        )
        o = broadcast_from_last_stage(obj if last else None, pp_group=pp, device=dev)
        assert is_on_device(t) == emulate
    return {"tensor": t.cpu(), "obj": o}


@pytest.mark.multiprocess
@pytest.mark.parametrize("emulate", [False, True], ids=["host", "emulated_cuda_nccl"])
def test_every_stage_gets_the_last_stage_value(emulate):
    want_rows, want_obj = _stage_values(1)  # the last of 2 stages
    res = run_distributed(_worker, 2, emulate, timeout=120)
    for rank in (0, 1):
        torch.testing.assert_close(res[rank]["tensor"], want_rows, rtol=0, atol=0)
        assert res[rank]["obj"]["loss"] == want_obj["loss"]
        torch.testing.assert_close(res[rank]["obj"]["rows"], want_rows, rtol=0, atol=0)
