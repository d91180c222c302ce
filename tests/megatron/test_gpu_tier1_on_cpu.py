# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The GPU kit's tier 1 (`clipo_testkit.gpu_tier1`) on CPU: its own functions over gloo, under
`emulated_cuda()` (every group declared NCCL, tensors on the emulated device), so CI runs the
code paths the GPU node will run. What only a GPU can show (NCCL itself, CUDA kernels in
bf16, real times) is left to the `gpu` test at the bottom, which skips here.

- world 2: the whole tier-1 run (a: parallel checks; b: bf16 vs fp32 capture on the 2-layer
  model; c: the cost table at tiny shapes, a smoke run);
- worlds 1 and 4: part a alone, so the checks are known to work for worlds other than 2
  (the pooling pads S to a multiple of the world; a world of 1 has no parallel partner).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")

from clipo_testkit import gpu_tier1, parallel_checks  # noqa: E402

from .dist_utils import run_distributed  # noqa: E402

pytestmark = [pytest.mark.mcore]


def _whole_run(rank, world):
    from clipo_testkit import step_cost
    from clipo_testkit.emulated_cuda import emulated_cuda

    with emulated_cuda():
        return gpu_tier1.run_tier1(
            rank, world, "cuda", shapes=step_cost.TINY_SHAPES, larger_bf16=False, repeats=2,
            events=False,
        )  # fmt: skip


def _part_a(rank, world):
    from clipo_testkit.emulated_cuda import emulated_cuda

    with emulated_cuda():
        return gpu_tier1.equivalence(rank, world, "cuda")


@pytest.fixture(scope="module")
def whole_run():
    return run_distributed(_whole_run, 2, timeout=300)


@pytest.mark.multiprocess
def test_tier1_passes_on_two_emulated_gpus(whole_run, capsys):
    summary = whole_run[0]
    assert summary["failures"] == [], "\n".join(summary["failures"])
    assert summary["ok"] and whole_run[1]["world"] == 2
    diffs = summary["equivalence"]["diffs"]
    assert set(parallel_checks.CHECKS) <= set(diffs)
    assert diffs["pool_tp_replicas"] == 0.0  # TP replicas with SP off: bit for bit


@pytest.mark.multiprocess
def test_tier1_bf16_capture_within_tolerance(whole_run):
    from clipo_testkit.bf16_capture import POOLED_RTOL

    rep = whole_run[0]["bf16"]
    assert rep["failures"] == []
    # bf16 does change the numbers (a zero error would mean the bf16 model ran in fp32)
    assert 0 < rep["pooled_rel_err"] <= POOLED_RTOL
    assert rep["reward_max_abs"] <= rep["reward_bound"] + 1e-6


@pytest.mark.multiprocess
def test_tier1_cost_table_smoke(whole_run):
    cost = whole_run[0]["cost"]
    assert [r["part"].split(",")[0] for r in cost] == [
        "clipo_step", "pooling", "pooling", "output layer + log-softmax", "logprob forward",
    ]  # fmt: skip
    assert all(r["ms"] > 0 for r in cost)


@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [1, 4])
def test_parallel_checks_for_other_world_sizes(world):
    results = run_distributed(_part_a, world, timeout=300)
    diffs, failures = results[0]
    assert not failures, "\n".join(failures)
    assert all(d < float("inf") for d in diffs.values())
    assert all(results[r] is None for r in range(1, world))  # only rank 0 compares


def test_equivalence_table_names_a_world_of_one():
    text = gpu_tier1.equivalence_table({"gather": 0.0, "pool_sp": 1e-7}, [], 1)
    assert "| gather | 0 | pass |" in text and "nothing is parallel" in text
    text = gpu_tier1.equivalence_table({"gather": 2.0}, ["gather: max |diff| 2"], 2)
    assert "| gather | 2 | FAIL |" in text


def test_main_without_cuda_says_so_and_exits_2(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_tier1.main([]) == 2
    assert capsys.readouterr().err.strip() == gpu_tier1.NO_GPU


@pytest.mark.gpu
def test_tier1_on_the_gpus_present(tmp_path):
    """The real thing: torchrun over every GPU here, NCCL, bf16 CUDA kernels, CUDA-event times."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        pytest.skip("no CUDA GPU here: tier 1 on GPUs runs via `bash scripts/check_gpu.sh`")
    torchrun = f"{sys.executable} -m torch.distributed.run"
    cmd = f"{torchrun} --standalone --nproc_per_node={torch.cuda.device_count()} -m " + (
        f"clipo_testkit.gpu_tier1 --summary {tmp_path / 'tier1.json'} --repeats 3"
    )
    root = str(Path(__file__).resolve().parents[2])  # clipo_testkit is not installed: the checkout
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(cmd.split(), capture_output=True, text=True, env=env, cwd=root)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
