# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The emulated device's tag: which tensors are "on cuda:0", and the two torch-function hooks
(the tensor subclass and the mode) whose rules `clipo_testkit/emulated_cuda.py` installs.

The bottom of the emulation: the moves, the calls that answer differently on the device,
autograd's tag carrying and the NCCL guards all read and set the tag through these public
names, and none of them needs the rules, so nothing here imports upward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
from torch.utils._pytree import tree_flatten, tree_map

CUDA = torch.device("cuda", 0)
MIXED = (
    "Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:0 and cpu! (emulated CUDA: {op})"
)
Rule = Callable[[Any, tuple, dict], Any]  # (func, args, kwargs) -> the call's result


class EmulatedDeviceError(RuntimeError):
    """What CUDA raises on a host/device mix-up (a RuntimeError, as torch's own)."""


class EmulatedNondeterminismError(RuntimeError):
    """Stricter than CUDA, on purpose: where a GPU would silently give order-dependent sums."""


_RULES: dict[str, Rule] = {}  # "tensor" / "mode" -> the installed rules


def install_rules(*, tensor: Rule, mode: Rule) -> None:
    """The device's rules, for calls on device tensors (`tensor`) and for every call inside
    `emulated_cuda()` (`mode`: factories and moves of host tensors, which the subclass never
    sees). Installed once by `clipo_testkit/emulated_cuda.py`."""
    _RULES.update(tensor=tensor, mode=mode)


def _rule(kind: str) -> Rule:
    try:
        return _RULES[kind]
    except KeyError:  # e.g. a device tensor unpickled in a process that never imported them
        raise RuntimeError(
            "an emulated-CUDA tensor is used where the emulation's rules are not installed; "
            "import clipo_testkit.emulated_cuda (and move the tensor to the host with "
            ".cpu() before it leaves the emulated process)"
        ) from None


class EmulatedCudaTensor(torch.Tensor):
    """A host tensor that behaves, device-wise, as one on cuda:0 (clipo_testkit/emulated_cuda.py)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _rule("tensor")(func, args, kwargs or {})


class EmulatedCudaMode(TorchFunctionMode):
    """The emulation's torch-function mode (per thread, as torch's modes are)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return _rule("mode")(func, args, kwargs or {})


@contextlib.contextmanager
def mode_on_this_thread() -> Iterator[None]:
    """The emulation's mode on the calling thread, unless it is there already: torch's modes are
    per thread (Ray runs an actor's methods on other threads than the one that built it), and a
    mode is popped while its own handler runs (autograd's engine, from `backward`)."""
    if any(isinstance(m, EmulatedCudaMode) for m in _get_current_function_mode_stack()):
        yield
        return
    with EmulatedCudaMode():
        yield


def is_on_device(t: Any) -> bool:
    return isinstance(t, EmulatedCudaTensor)


def plain(t: torch.Tensor) -> torch.Tensor:
    """The host tensor under a device tensor (an alias, untagged)."""
    with torch._C.DisableTorchFunctionSubclass():
        return t.as_subclass(torch.Tensor) if isinstance(t, EmulatedCudaTensor) else t


def own(t: Any) -> Any:
    """A plain tensor made by an op marked a device tensor in place: an alias (`as_subclass`)
    would add a node per op to autograd's graph and hide the AccumulateGrad node that
    Megatron-Core's DDP hooks (`param.expand_as(param).grad_fn.next_functions[0][0]`)."""
    if type(t) is torch.Tensor:
        t.__class__ = EmulatedCudaTensor
    return t


def tag(x: Any) -> Any:
    """Tag every tensor in `x` (already on the host, freshly made) as a device tensor."""
    return tree_map(own, x)


def tensors_in(args, kwargs) -> list[torch.Tensor]:
    flat, _ = tree_flatten((args, kwargs or {}))
    return [a for a in flat if isinstance(a, torch.Tensor)]


def untag_if_tensor(t):
    return plain(t) if isinstance(t, torch.Tensor) else t
