# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The emulation's rules, each checked both ways: what CUDA refuses raises, what it allows runs."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.device_rules

from clipo_testkit.emulated_cuda import (  # noqa: E402
    EmulatedDeviceError,
    EmulatedNondeterminismError,
    emulated_cuda,
    is_on_device,
)


def test_placement_and_reporting():
    with emulated_cuda():
        x = torch.arange(6.0).cuda()
        assert is_on_device(x) and x.is_cuda and x.device == torch.device("cuda", 0)
        assert is_on_device(torch.zeros(2, device=x.device))
        assert is_on_device(torch.tensor([1, 2], device="cuda"))
        assert is_on_device(torch.ones(2).to(0)) and is_on_device(torch.ones(2).to(x))
        assert not is_on_device(torch.zeros(2, device="cpu"))
        assert is_on_device(x.double()) and is_on_device(x * 2) and is_on_device(x[1:])
        h = x.cpu()
        assert not is_on_device(h) and h.device.type == "cpu"
        h[0] = 100.0  # a copy, as on a GPU
        assert float(x[0]) == 0.0
        assert not is_on_device(x.to("cpu")) and torch.cuda.is_available()
    assert not torch.cuda.is_available() or torch.version.cuda  # restored on exit


def test_mixing_rules():
    with emulated_cuda():
        x, h = torch.arange(6.0).cuda(), torch.ones(6)
        for bad in (lambda: x + h, lambda: torch.cat([x, h]), lambda: torch.where(h > 0, x, x)):
            with pytest.raises(EmulatedDeviceError, match="same device"):
                bad()
        assert is_on_device(x + torch.tensor(2.0))  # host scalars are fine
        assert is_on_device(x[torch.tensor([0, 1])])  # host index into a device tensor: fine
        assert is_on_device(x[torch.tensor([True, False] * 3)])
        with pytest.raises(EmulatedDeviceError, match="indices should be"):
            h[x.long()[:2]]  # device index into a host tensor
        y = x.clone()
        y[:2] = torch.tensor([1.0, 2.0])  # slice assignment copies across devices
        with pytest.raises(EmulatedDeviceError):
            y[torch.tensor([0, 1])] = torch.tensor([1.0, 2.0])  # index_put_ needs one device
        with pytest.raises(TypeError, match="numpy"):
            x.numpy()
        assert int(x.sum()) == 15 and x.tolist()[1] == 1.0


def test_modules_autograd_and_optimizer_stay_on_the_device():
    with emulated_cuda():
        m = torch.nn.Linear(6, 2).to(torch.cuda.current_device())
        assert is_on_device(m.weight) and isinstance(m.weight, torch.nn.Parameter)
        with pytest.raises(EmulatedDeviceError):
            m(torch.ones(1, 6))
        opt = torch.optim.AdamW(m.parameters(), lr=0.1)
        m(torch.ones(1, 6).cuda()).sum().backward()
        assert is_on_device(m.weight.grad)
        opt.step()
        assert is_on_device(m.weight)

        class Twice(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                return t * 2

            @staticmethod
            def backward(ctx, g):
                assert is_on_device(g) and is_on_device(g * 2)  # as a GPU's backward sees it
                return g * 2

        t = torch.ones(3).cuda().requires_grad_(True)
        Twice.apply(t).sum().backward()
        assert is_on_device(t.grad)


def test_module_moves_keep_parameter_attributes():
    """Megatron-Core marks parameters (`shared`, `tensor_model_parallel`, `sequence_parallel`) and
    reads the marks after `model.cuda()` (the grad norm skips shared and TP-duplicate ones); on a
    GPU the move keeps the Parameter object and its attributes, so the emulated move must too."""
    with emulated_cuda():
        m = torch.nn.Linear(2, 2)
        m.weight.shared, m.bias.sequence_parallel = True, True
        w = m.weight
        m.cuda()
        assert m.weight is w and is_on_device(m.weight)
        assert m.weight.shared is True and m.bias.sequence_parallel is True
        m.to(torch.device("cuda", 0), dtype=torch.float64)
        assert m.weight.shared is True and m.weight.dtype == torch.float64


def test_load_state_dict_copies_into_the_parameters_in_place():
    """On a GPU `load_state_dict` copies into each parameter's storage, so a parameter that views
    Megatron-Core's contiguous DDP buffer still views it after NeMo-RL swaps the reference
    weights in and out; the emulation must not replace the storage (as a swap would)."""
    with emulated_cuda():
        m = torch.nn.Linear(2, 2).cuda()
        m.weight.main_grad = torch.zeros(2, 2).cuda()
        ptr = m.weight.data_ptr()
        m.load_state_dict({"weight": torch.ones(2, 2), "bias": torch.zeros(2).cuda()})
        assert m.weight.data_ptr() == ptr and is_on_device(m.weight)
        assert float(m.weight.sum()) == 4.0 and hasattr(m.weight, "main_grad")


def test_the_rules_on_another_thread():
    """torch's function modes are per thread (Ray runs actor methods on threads of their own):
    `emulated_cuda_on_this_thread` gives a thread the rules of an `emulated_cuda()` entered
    elsewhere, once (nested, it adds no second mode)."""
    import threading

    from clipo_testkit.emulated_cuda import emulated_cuda_on_this_thread

    out: dict = {}

    def body():
        with emulated_cuda_on_this_thread():
            out["device"] = is_on_device(torch.ones(2).cuda())
            with emulated_cuda_on_this_thread():
                out["nested"] = is_on_device(torch.ones(2).cuda() + 1)
                try:
                    torch.ones(2).cuda() + torch.ones(2)
                    out["mixed"] = "allowed"
                except EmulatedDeviceError:
                    out["mixed"] = "refused"

    with emulated_cuda():
        worker = threading.Thread(target=body)
        worker.start()
        worker.join()
    assert out == {"device": True, "nested": True, "mixed": "refused"}


def test_deepcopy_keeps_the_device():
    """Megatron-Core deep-copies the optimizer's `step` into every parameter's state on a resume."""
    import copy

    with emulated_cuda():
        step = torch.tensor(3.0).cuda()
        step.note = "kept"
        twin = copy.deepcopy({"a": step, "b": step})
        assert is_on_device(twin["a"]) and twin["a"] is twin["b"] and twin["a"] is not step
        assert float(twin["a"]) == 3.0 and twin["a"].note == "kept"
        twin["a"].add_(1)
        assert float(step) == 3.0  # a copy
        assert not is_on_device(copy.deepcopy(torch.ones(2)))


def test_atomic_accumulation_needs_deterministic_algorithms():
    from clipo_megatron.megatron.pooling.masked_mean import deterministic_algorithms

    idx = torch.tensor([0, 1, 0])
    with emulated_cuda():
        z, v = torch.zeros(2).cuda(), torch.ones(3).cuda()
        with pytest.raises(EmulatedNondeterminismError):
            z.index_add(0, idx.cuda(), v)
        with deterministic_algorithms():
            assert z.index_add(0, idx.cuda(), v).tolist() == [2.0, 1.0]
        assert not torch.are_deterministic_algorithms_enabled()  # restored
    with emulated_cuda(strict_order=False):
        torch.zeros(2).cuda().index_add(0, idx.cuda(), torch.ones(3).cuda())


def _nccl_worker(rank, world):
    import torch.distributed as dist

    with emulated_cuda():
        t = torch.ones(2).cuda()
        dist.all_reduce(t)
        ok = t.tolist()
        try:
            dist.all_reduce(torch.ones(2))
            host = "sent"
        except EmulatedDeviceError as e:
            host = str(e)
        out = [torch.zeros(2).cuda() for _ in range(world)]
        dist.all_gather(out, t)
    with emulated_cuda(nccl_groups="none"):  # a gloo group takes host tensors
        dist.all_reduce(torch.ones(2))
    return {"ok": ok, "host": host, "gathered": [o.cpu().tolist() for o in out]}


@pytest.mark.multiprocess
def test_nccl_groups_refuse_host_tensors():
    from tests.megatron.dist_utils import run_distributed

    res = run_distributed(_nccl_worker, 2, timeout=60)
    for r in (0, 1):
        assert res[r]["ok"] == [2.0, 2.0] and res[r]["gathered"] == [[2.0, 2.0]] * 2
        assert "NCCL takes device tensors only" in res[r]["host"]


def _p2p_worker(rank, world):
    """Megatron-Core's pipeline send / recv: `P2POp(dist.isend, ...)` through `batch_isend_irecv`
    (torch checks the op is its own `isend` / `irecv`, so the guard must be that name too)."""
    import torch.distributed as dist

    peer = 1 - rank
    with emulated_cuda():
        send, recv = torch.full((3,), float(rank + 1)).cuda(), torch.zeros(3).cuda()
        ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        got = (is_on_device(recv), recv.cpu().tolist())
        try:  # refused before anything is sent (gloo runs a batch op by op), so no peer waits
            dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(3), peer)])
            host = "sent"
        except EmulatedDeviceError as e:
            host = str(e)
    return {"got": got, "host": host}


@pytest.mark.multiprocess
def test_pipeline_point_to_point_under_the_emulation():
    from tests.megatron.dist_utils import run_distributed

    res = run_distributed(_p2p_worker, 2, timeout=60)
    for r in (0, 1):
        assert res[r]["got"] == (True, [float(2 - r)] * 3)
        assert "isend: NCCL takes device tensors only" in res[r]["host"]


def test_the_device_spellings_nemo_rl_and_megatron_use():
    """Each way NeMo-RL's worker and Megatron-Core put a tensor on the GPU lands on the emulated
    device with its values; the host spellings (pinned buffers, meta, copies back) stay off it."""
    h = torch.arange(4.0)
    with emulated_cuda():
        dev = torch.cuda.current_device()
        placed = {
            '.to("cuda")': h.to("cuda"),
            ".cuda(non_blocking=True)": h.cuda(non_blocking=True),
            ".to(current_device())": h.to(dev),
            ".to(device=dev, non_blocking=True)": h.to(device=dev, non_blocking=True),
            'torch.device("cuda", 0)': h.to(torch.device("cuda", 0)),
            '.to("cuda:0", float64, False, True)': h.to("cuda:0", torch.float64, False, True),
            'zeros(device="cuda")': torch.zeros(4, device="cuda") + h.cuda(),
            "empty(device=0)": torch.empty(4, device=0).copy_(h),
            "tensor(device=current_device())": torch.tensor(h.tolist(), device=dev),
            "pinned then .cuda(non_blocking)": torch.tensor(h.tolist(), pin_memory=True).cuda(
                non_blocking=True
            ),
            '.type("torch.cuda.FloatTensor")': h.type("torch.cuda.FloatTensor"),
            "dict .to('cuda') (BatchedDataDict)": {"x": h}["x"].to("cuda"),
        }
        assert [k for k, v in placed.items() if not is_on_device(v)] == []
        assert all(v.cpu().tolist() == h.tolist() for v in placed.values())
        assert not is_on_device(h.to(torch.float64, False, True))  # bools are not devices
        assert not is_on_device(torch.empty(2, device="cpu", pin_memory=True))
        meta = torch.empty(2, device="meta")
        assert meta.is_meta and not is_on_device(meta)
        x = placed['.to("cuda")']
        back = x.to(device="cpu", non_blocking=True, copy=True)
        assert not is_on_device(back) and back.tolist() == h.tolist()
        assert (x.type(), x.long().type(), h.type()) == (
            "torch.cuda.FloatTensor",
            "torch.cuda.LongTensor",
            "torch.FloatTensor",
        )
        assert not is_on_device(x.type("torch.FloatTensor"))
        m = torch.nn.Linear(2, 2).to(device=dev, non_blocking=True)
        assert is_on_device(m.weight) and m.weight.type() == "torch.cuda.FloatTensor"


def test_autograd_graph_is_the_real_one_and_moves_copy():
    """A device result is the op's own tensor, not an alias: Megatron-Core's DDP hooks the node
    `param.expand_as(param).grad_fn.next_functions[0][0]` (AccumulateGrad on a GPU); an alias
    per op put an AliasBackward there and its grads never reached main_grad (grad norm 0)."""
    h = torch.arange(3.0)
    with emulated_cuda():
        p = torch.nn.Linear(3, 1).cuda().weight
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        assert type(acc).__name__ == "AccumulateGrad" and acc.variable is p
        y = p * 2
        assert type(y.grad_fn).__name__ == "MulBackward0"
        leaf = torch.zeros(3, device="cuda", requires_grad=True)
        assert leaf.is_leaf and is_on_device(leaf)
        for moved in (h.to(device=0, non_blocking=True), torch.as_tensor(h, device="cuda")):
            moved += 1.0  # a copy on the device: the host tensor is untouched
            assert is_on_device(moved) and not is_on_device(h) and h.tolist() == [0.0, 1.0, 2.0]
        c = torch.empty(3).copy_(p[0].detach())  # an in-place op returns its (host) self
        assert not is_on_device(c)


_PIN = """
import torch
from clipo_testkit.emulated_cuda import emulated_cuda
with emulated_cuda():
    x = torch.arange(4.0).to("cuda")
    try:
        x.pin_memory()
    except RuntimeError as e:
        print(e)
"""


def test_a_device_tensor_cannot_be_pinned():
    """CUDA refuses to pin a device tensor; so does the emulator. In a fresh interpreter: in one
    full-suite run (CI rehearsal, 1254 tests before it) the same lines inside the spellings test
    did not raise, and alone, or after any directory of the suite, they did; the process state
    that did it was not found (docs/megatron.md)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]  # `-c` imports from cwd: clipo_testkit's checkout
    run = [sys.executable, "-c", _PIN]
    out = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=root)
    assert "only dense CPU tensors can be pinned" in out.stdout, out.stdout + out.stderr


def test_a_device_tensor_without_the_rules_names_the_fix(monkeypatch):
    """A tagged tensor in a process that never installed the rules (unpickled there) raises one
    line saying what to import, not a KeyError."""
    from clipo_testkit import emulated_tags

    with emulated_cuda():
        t = torch.ones(2, device="cuda")
    monkeypatch.setattr(emulated_tags, "_RULES", {})
    with pytest.raises(RuntimeError, match="import clipo_testkit.emulated_cuda"):
        t + 1
