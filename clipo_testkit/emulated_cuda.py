# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CUDA's device rules on a CPU machine: host/device mix-ups fail as they would on a GPU.

Every CPU test over gloo runs host tensors only, so a host tensor indexing a
device tensor, a mask built on the host for device rows, or a host buffer sent
through NCCL never shows. Inside `emulated_cuda()`:

- tensors placed on "cuda" (`.cuda()`, `.to("cuda"/0/device)`, factories with `device="cuda"`,
  `nn.Module.to("cuda")`) are CPU tensors of the subclass `EmulatedCudaTensor`, which reports
  `device == cuda:0` and `is_cuda`; everything computed from them stays tagged; `.cpu()` /
  `.to("cpu")` untag (a copy, as on a GPU; every spelling NeMo-RL uses: clipo_testkit/emulated_moves.py);
- an op that mixes tagged and untagged tensors raises as CUDA does (0-dim host tensors are
  allowed as CUDA allows scalars; a host index into a device tensor is allowed, a device index
  into a host tensor is not; `copy_` crosses devices); `.numpy()` of a device tensor raises;
- `torch.distributed` collectives on a group declared NCCL (all groups, by default) refuse host
  tensors, as NCCL does;
- custom `autograd.Function`s (Megatron-Core's linears) carry the tags through their
  outputs, saved tensors, backward grads and hooks: autograd re-wraps tensors in C++, where
  the tag is lost (clipo_testkit/emulated_autograd.py says where and what restores it);
- `.type()` says `torch.cuda.FloatTensor` (Megatron-Core's optimizer checks it),
  `pin_memory` pins nothing, and backward runs under these rules (clipo_testkit/emulated_calls.py);
- `torch.cuda.is_available()` is True, `current_device()` is 0, and the device's one stream
  runs in order with the host (`current_stream()` waits and `synchronize()` are no-ops);
- a device tensor is the op's own result retyped in place, not an alias, so autograd's
  graph is the one a GPU run builds (Megatron-Core's DDP hooks AccumulateGrad nodes);
- stricter than CUDA: ops that CUDA accumulates with atomics (`index_add`, `scatter_add`, ...)
  raise on device tensors unless deterministic algorithms are on, since on a GPU their sums
  differ from run to run and between replicas.

Strict where CUDA is strict, lenient where it is lenient (tests/testing/test_emulated_cuda.py
checks each rule both ways); the CPU kernels compute, so results equal plain CPU runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import torch

from clipo_testkit import emulated_calls, emulated_moves
from clipo_testkit.emulated_autograd import tags_through_functions
from clipo_testkit.emulated_nccl import nccl_guards
from clipo_testkit.emulated_tags import (
    CUDA,
    MIXED,
    EmulatedCudaMode,
    EmulatedCudaTensor,
    EmulatedDeviceError,
    EmulatedNondeterminismError,
    install_rules,
    is_on_device,
    mode_on_this_thread,
    own,
    tag,
    tensors_in,
)

__all__ = [
    "EmulatedCudaTensor",
    "EmulatedDeviceError",
    "EmulatedNondeterminismError",
    "emulated_cuda",
    "emulated_cuda_on_this_thread",
    "is_on_device",
]


# Ops CUDA runs with floating-point atomics unless deterministic algorithms are on.
_ATOMIC_ON_CUDA = {
    "index_add",
    "index_add_",
    "scatter_add",
    "scatter_add_",
    "scatter_reduce",
    "scatter_reduce_",
}
_STRICT_ORDER = [True]  # emulated_cuda(strict_order=...) for the block


# The property getters torch function reports (typed as the values they return).
_GRAD_GET = torch.Tensor.grad.__get__  # type: ignore[union-attr]


def _grad_of(t: torch.Tensor):
    """A device tensor's .grad is on the device (autograd's engine makes plain tensors)."""
    with torch._C.DisableTorchFunctionSubclass():
        g = _GRAD_GET(t)
    return None if g is None else tag(g)


_GETTERS: dict[Any, Callable] = {
    torch.Tensor.device.__get__: lambda t: CUDA,
    torch.Tensor.is_cuda.__get__: lambda t: True,  # type: ignore[attr-defined]
    _GRAD_GET: _grad_of,
}
_NOWRAP = torch.overrides.get_default_nowrap_functions()
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__}
# cross the devices on a GPU too (copies), or compute nothing (Module.to's bookkeeping)
_CROSS_DEVICE = {torch.Tensor.copy_, torch._has_compatible_shallow_copy_type}


def _check_mix(func, args, kwargs) -> None:
    tensors = tensors_in(args, kwargs)
    if not any(is_on_device(t) for t in tensors) or func in _CROSS_DEVICE:
        return
    name = getattr(func, "__name__", repr(func))
    if func in _INDEXING:
        target = args[0]
        index = args[1] if len(args) > 1 else None
        idx_tensors = tensors_in((index,), None)
        if not is_on_device(target):
            if any(is_on_device(t) and t.dim() > 0 for t in idx_tensors):
                raise EmulatedDeviceError(
                    "indices should be either on cpu or on the same device as the indexed "
                    f"tensor (cpu) (emulated CUDA: {name})"
                )
            if func is torch.Tensor.__setitem__ and is_on_device(args[2]) and args[2].dim() > 0:
                raise EmulatedDeviceError(MIXED.format(op=name + " value"))
            return
        if func is torch.Tensor.__setitem__:  # device target: a host value must be a scalar
            value = args[2]
            if isinstance(value, torch.Tensor) and not is_on_device(value) and value.dim() > 0:
                if idx_tensors:  # index_put_ demands one device; a plain slice copies
                    raise EmulatedDeviceError(MIXED.format(op=name + " value"))
        return
    host = [t for t in tensors if not is_on_device(t) and t.dim() > 0]
    if host:
        raise EmulatedDeviceError(MIXED.format(op=name))


def _tensor_rules(func, args: tuple, kwargs: dict):
    """A call on a device tensor: property getters, the calls answered differently, moves, the
    mix check and the atomics check; the result tagged."""
    getter = _GETTERS.get(func)
    if getter is not None:
        return getter(args[0])
    if func in emulated_calls.SPECIAL:
        return emulated_calls.SPECIAL[func](args, kwargs)
    name = getattr(func, "__name__", "")
    if name == "numpy" and is_on_device(args[0]):
        raise TypeError(
            "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first. (emulated CUDA)"
        )
    target = emulated_moves.device_target(func, args, kwargs)
    if target is not None and isinstance(args[0], torch.Tensor):
        return emulated_moves.move(func, args, kwargs, target)
    _check_mix(func, args, kwargs)
    if (
        name in _ATOMIC_ON_CUDA
        and _STRICT_ORDER[0]
        and not torch.are_deterministic_algorithms_enabled()
    ):
        raise EmulatedNondeterminismError(
            f"{name} on a CUDA tensor accumulates with atomics: its sums differ between "
            "runs and between replicas that compute the same rows. Run it under "
            "torch.use_deterministic_algorithms(True) (megatron.pooling.masked_mean.deterministic_algorithms). "
            "(emulated CUDA)"
        )
    with torch._C.DisableTorchFunctionSubclass():
        out = func(*args, **kwargs)
    if func in _NOWRAP:
        return out
    given = {id(t) for t in tensors_in(args, kwargs)}  # in-place ops return an input as-is
    for t in out if isinstance(out, tuple | list) else (out,):  # torch.Size stays one
        if id(t) not in given:
            own(t)
    return out


def _mode_rules(func, args: tuple, kwargs: dict):
    """Any call inside `emulated_cuda()`: factories with device=cuda and moves of host tensors
    (which the subclass never sees)."""
    if func in emulated_calls.SPECIAL:
        return emulated_calls.SPECIAL[func](args, kwargs)
    if func in emulated_calls.ENGINE:
        return emulated_calls.ENGINE[func](func, args, kwargs)
    if kwargs.get("pin_memory"):  # pinned memory is host memory (a CPU build has none)
        kwargs = {**kwargs, "pin_memory": False}
    if func is torch._C._nn._parse_to:  # Module.to(0 / "cuda"): parse on the host, answer cuda
        return emulated_moves.parse_to(func, args, kwargs)
    target = emulated_moves.device_target(func, args, kwargs)
    if target is not None and args and isinstance(args[0], torch.Tensor):
        # every move is answered here: a mode below (cpu_shims) must not rewrite it
        return emulated_moves.move(func, args, kwargs, target)
    if "device" in kwargs and emulated_moves.is_cuda_device(kwargs["device"]) is not None:
        return emulated_moves.factory(func, args, kwargs)
    return func(*args, **kwargs)


install_rules(tensor=_tensor_rules, mode=_mode_rules)


_NOOP = lambda *a, **k: None  # noqa: E731
# The device's one stream: in order with the host (waits are no-ops), never capturing a graph.
_NO_STREAM = SimpleNamespace(
    is_capturing=lambda: False, wait_event=_NOOP, wait_stream=_NOOP, synchronize=_NOOP
)
_CUDA_CALLS = {  # torch.cuda answers for the emulated device (Megatron-Core's DDP waits on it)
    "is_available": lambda: True,
    "current_device": lambda: 0,
    "current_stream": lambda *a, **k: _NO_STREAM,
    "synchronize": _NOOP,
}


@contextlib.contextmanager
def emulated_cuda(
    *, nccl_groups: str | Callable[[Any], bool] = "all", strict_order: bool = True
) -> Iterator[None]:
    """Run the body under CUDA's device rules (module doc). nccl_groups: "all", "none", or a
    predicate on the process group (None = the default group) naming the groups declared NCCL.
    strict_order: atomic-accumulating ops on device tensors (index_add, scatter_add, ...)
    raise unless deterministic algorithms are on."""
    if isinstance(nccl_groups, str):  # "all" / "none" (a KeyError names anything else)
        on = {"all": True, "none": False}[nccl_groups]
    nccl = (lambda g: on) if isinstance(nccl_groups, str) else nccl_groups
    saved_cuda = {k: getattr(torch.cuda, k) for k in _CUDA_CALLS}

    # A CUDA build of torch on a GPU-less machine: the optimizer asks the (patched-available)
    # accelerator whether a graph is being captured; no stream exists, none is.
    saved_stream = getattr(torch, "accelerator", None) and torch.accelerator.current_stream
    for k, f in _CUDA_CALLS.items():
        setattr(torch.cuda, k, f)
    if saved_stream is not None:
        torch.accelerator.current_stream = lambda *a, **k: _NO_STREAM  # type: ignore[assignment]
    saved_order = _STRICT_ORDER[0]
    _STRICT_ORDER[0] = strict_order
    # Module.to keeps the device tag and the parameters their attributes (emulated_moves)
    saved_apply, saved_swap = torch.nn.Module._apply, torch.utils.swap_tensors
    torch.nn.Module._apply = emulated_moves.apply_swapping(saved_apply)  # type: ignore[method-assign]
    torch.utils.swap_tensors = emulated_moves.swap_keeping_attributes(saved_swap)

    try:
        with tags_through_functions(), nccl_guards(nccl), EmulatedCudaMode():
            yield
    finally:
        torch.nn.Module._apply = saved_apply  # type: ignore[method-assign]
        torch.utils.swap_tensors = saved_swap
        _STRICT_ORDER[0] = saved_order
        for k, f in saved_cuda.items():
            setattr(torch.cuda, k, f)
        if saved_stream is not None:
            torch.accelerator.current_stream = saved_stream


# The device rules on the calling thread, inside an `emulated_cuda()` another thread entered.
emulated_cuda_on_this_thread = mode_on_this_thread
