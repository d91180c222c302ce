# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Run Megatron-Core's CUDA-assuming code paths on a CPU-only machine.

Megatron-Core asks for `torch.cuda.current_device()` (RoPE, p2p), writes
`device="cuda"` literals (pipeline schedules) and pins memory. On a machine
without CUDA these fail although the math runs fine on CPU. `cpu_shims()`
redirects exactly those calls to the CPU for the duration of a `with` block
(or process-wide with `enable_cpu_shims()`), and refuses to do anything when
CUDA is available, so the GPU path is never altered.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_ENABLED = False


def _is_cuda_device(dev) -> bool:
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    if isinstance(dev, int):
        return True  # an integer device index means a CUDA ordinal in Megatron
    return isinstance(dev, str) and dev.startswith("cuda")


class _CudaToCpu(TorchFunctionMode):
    """Rewrites device="cuda" arguments to CPU and makes .cuda() a no-op."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda_device(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        name = getattr(func, "__name__", "")
        if name == "pin_memory" and args and isinstance(args[0], torch.Tensor):
            # torch copies an unpinned host tensor into pinned memory: a copy, never an alias.
            # Megatron's DDP offload (`param_data.cpu().pin_memory()` then `resize_(0)`) keeps
            # the only copy of the weights in it.
            return args[0].clone()
        if name == "cuda" and args and isinstance(args[0], torch.Tensor):
            return args[0]
        if name == "to" and args and len(args) > 1 and _is_cuda_device(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


def _cpu_device() -> Any:
    """Megatron places tensors on `torch.cuda.current_device()`: on CPU that is "cpu"."""
    return "cpu"


def _no_sync(*args: Any, **kwargs: Any) -> None:
    return None


def enable_cpu_shims() -> None:
    """Process-wide: patch torch.cuda.current_device/synchronize and push the device mode."""
    global _ENABLED
    if _ENABLED or torch.cuda.is_available():
        return
    torch.cuda.current_device = _cpu_device
    torch.cuda.synchronize = _no_sync
    _CudaToCpu().__enter__()
    _ENABLED = True


@contextlib.contextmanager
def cpu_shims():
    """Scoped variant of `enable_cpu_shims` (restores torch.cuda on exit)."""
    if torch.cuda.is_available():
        yield
        return
    saved = torch.cuda.current_device, torch.cuda.synchronize
    torch.cuda.current_device = _cpu_device
    torch.cuda.synchronize = _no_sync
    try:
        with _CudaToCpu():
            yield
    finally:
        torch.cuda.current_device, torch.cuda.synchronize = saved
