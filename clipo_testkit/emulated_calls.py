# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Tensor calls that answer differently on the emulated device (`emulated_cuda()`).

- `.type()` says `torch.cuda.FloatTensor` for a device tensor, as Megatron-Core's optimizer
  and grad clipping check (`clip_grads.py`: `param.grad.type() == 'torch.cuda.FloatTensor'`);
  `.type("torch.cuda.FloatTensor")` moves to the device (and a host type string to the host);
- `pin_memory` (the factory keyword and the method) pins nothing: a CPU build has no pinned
  allocator, and pinned memory is host memory, so the result is an untagged host tensor; a
  device tensor cannot be pinned (CUDA's error);
- `copy.deepcopy` of a device tensor is a device tensor;
- `Tensor.backward` / `torch.autograd.backward` run autograd's engine under the rules: torch
  function hands them to the mode's handler with the mode popped (and to the subclass's
  default handler with subclass torch function off), so hooks and custom backwards would run
  outside the emulation; here the engine runs with both on.

`SPECIAL` and `ENGINE` map each call to its handler; `emulated_cuda`'s rules look them up.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.variable import Variable

from clipo_testkit import emulated_tags as tags


def _type_name(spec: Any) -> str | None:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, type):
        return f"{spec.__module__}.{spec.__name__}"
    return None  # a torch.dtype: a plain dtype cast, on the same device


def type_(args: tuple, kwargs: dict) -> Any:
    t, rest = args[0], args[1:]
    spec = rest[0] if rest else kwargs.get("dtype")
    plain = tags.plain(t)
    with torch._C.DisableTorchFunction():
        if spec is None:
            own: str = plain.type()
            return own.replace("torch.", "torch.cuda.", 1) if tags.is_on_device(t) else own
        name = _type_name(spec)
        if name is None:
            out = plain.type(spec)
            to_device = tags.is_on_device(t)
        else:
            to_device = ".cuda." in name
            out = plain.type(name.replace("torch.cuda.", "torch.", 1))
            if to_device == tags.is_on_device(t) and out is plain:
                return t  # already that type on that device: itself, as torch does
            if out is plain:
                out = plain.clone()  # a move copies
    return tags.own(out) if to_device else out


def pin_memory(args: tuple, kwargs: dict) -> Any:
    t = args[0]
    if tags.is_on_device(t):
        raise RuntimeError(
            "cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned "
            "(emulated CUDA)"
        )
    return tags.plain(t).clone()  # a pinned copy, on the host


def deepcopy(args: tuple, kwargs: dict) -> Any:
    """`copy.deepcopy` of a device tensor is a device tensor (Megatron-Core deep-copies the
    optimizer's `step` on a resume): torch's default makes the copy with `new_empty`, which
    comes back untagged, and then refuses the type."""
    t, memo = args[0], (args[1] if len(args) > 1 else kwargs.get("memo"))
    memo = {} if memo is None else memo
    with torch._C.DisableTorchFunction():
        if not tags.is_on_device(t):
            return torch.Tensor.__deepcopy__(t, memo)
        out = tags.own(torch.Tensor.__deepcopy__(tags.plain(t), memo))
    out.__dict__.update(copy.deepcopy(t.__dict__, memo))
    memo[id(t)] = out
    return out


_BACKWARD_SIG = {f: inspect.signature(f) for f in (torch.Tensor.backward, torch.autograd.backward)}


def backward(func: Any, args: tuple, kwargs: dict) -> Any:
    """Autograd's engine with the emulated mode pushed; anything unusual: torch's own path."""
    a = _BACKWARD_SIG[func].bind(*args, **kwargs).arguments
    if func is torch.Tensor.backward:
        roots, grads = a["self"], a.get("gradient")
    else:
        roots, grads = a["tensors"], a.get("grad_tensors")
    roots = (roots,) if isinstance(roots, torch.Tensor) else tuple(roots)
    if a.get("grad_variables") is not None or not all(isinstance(r, torch.Tensor) for r in roots):
        return func(*args, **kwargs)  # GradientEdge roots, deprecated spellings
    if grads is None or isinstance(grads, torch.Tensor):
        grads = (grads,) * len(roots) if grads is None else (grads,)
    made = []
    for r, g in zip(roots, grads, strict=True):
        if g is None:
            if r.requires_grad and r.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = torch.ones_like(r, memory_format=torch.preserve_format)
        made.append(g)
    inputs = a.get("inputs")
    inputs = () if inputs is None else (inputs,) if isinstance(inputs, torch.Tensor) else inputs
    create = bool(a.get("create_graph", False))
    retain = a.get("retain_graph")
    with torch._C._EnableTorchFunction(), tags.EmulatedCudaMode():
        Variable._execution_engine.run_backward(
            roots,
            tuple(made),
            create if retain is None else retain,
            create,
            tuple(inputs),
            allow_unreachable=True,
            accumulate_grad=True,
        )
    return None


# (args, kwargs) -> result, for device tensors and for the mode
SPECIAL: dict[Any, Callable] = {
    torch.Tensor.type: type_,
    torch.Tensor.pin_memory: pin_memory,
    torch.Tensor.__deepcopy__: deepcopy,
}
# (func, args, kwargs) -> result, for the mode
ENGINE: dict[Any, Callable] = {torch.Tensor.backward: backward, torch.autograd.backward: backward}
