# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Device tags through custom `torch.autograd.Function`s under `emulated_cuda()`.

The tag is the Python subclass `EmulatedCudaTensor`: it lives in the tensor's Python object,
not in its storage. Autograd makes new Python objects for tensors in C++, where no
`__torch_function__` runs, and so drops the tag (found on torch 2.13):

- outputs: a Function that returns one of its inputs as-is (Megatron-Core's
  `copy_to_tensor_model_parallel_region` at TP = 1) while that output takes no gradient
  (under `torch.no_grad()`, or `mark_non_differentiable`) and the input requires grad gets
  `var.detach()` in C++ (`custom_function.cpp`, `_process_backward_mode_ad`): a new, plain
  tensor on the same storage. In NeMo-RL's `get_logprobs` (no_grad) the decoder's last
  `make_viewless_tensor(requires_grad=True)` makes the hidden states exactly such an input,
  so the output layer's `LinearWithGradAccumulationAndAsyncCommunication` got a host input
  beside its device weight (`EmulatedDeviceError (matmul)`, mcore `layers.py:452`);
- `ctx.save_for_backward(out)` of the Function's own output: `SavedVariable` keeps
  `tensor_data()` (a new TensorImpl) to avoid a reference cycle, so `ctx.saved_tensors`
  gives it back plain;
- backward: `Tensor.backward` / `torch.autograd.backward` dispatch through torch function,
  so the engine runs inside the mode's handler (the mode popped) and inside the subclass's
  default handler (subclass torch function off): custom backwards would compute untagged
  results and `device="cuda"` factories there would reach the real (absent) CUDA;
- grads between built-in backward nodes are made in C++: a tensor hook sees them plain.

Not lost: inputs, tensors stashed on `ctx` (plain attributes keep the Python object) and
tensors a forward creates (returned as they are). The engine runs CPU graphs on the calling
thread (checked: a custom backward's thread id is the caller's), so no thread-local state
(the mode stack) is lost to engine threads.

The fix, while `emulated_cuda()` is active: `Function.apply` re-tags any output that shares
storage with a tagged input (one storage cannot be on both devices) and notes on the ctx the
devices of the inputs and outputs; `save_for_backward` notes the devices of what it saves
and `saved_tensors` restores them; each custom backward runs with torch function on and the
emulated mode pushed, gets its grads on the devices of the forward's outputs, and must return
each input's grad on that input's device (CUDA's engine check: "returned an invalid
gradient"; 0-dim grads are moved, as the engine does); hooks registered on a device tensor
get device grads. clipo_testkit/emulated_calls.py runs `backward` itself under the rules.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction, Function, FunctionCtx
from torch.utils._pytree import tree_map

from clipo_testkit.emulated_tags import (
    EmulatedDeviceError,
    is_on_device,
    mode_on_this_thread,
    own,
    plain,
    tensors_in,
)

_BASE_SAVED: Any = torch._C._FunctionBase.saved_tensors  # the C getter: plain tensors
_ABSENT = object()


def _retagged(t: Any) -> Any:
    """`t` (a plain tensor autograd made in C++) on the device again."""
    return own(t)


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return plain(t).untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # no storage (sparse, nested, meta...)
        return None


def _ctx_of(cls: type, outs: list[torch.Tensor]) -> Any:
    for t in outs:
        fn = t.grad_fn
        if isinstance(fn, cls._backward_cls):  # type: ignore[attr-defined]
            return fn
    return None


def _apply_carrying_tags(original: Callable) -> Callable:
    def apply(cls, *args, **kwargs):
        out = original(cls, *args, **kwargs)
        inputs = tensors_in(args, kwargs)
        on_device = {_storage_key(t) for t in inputs if is_on_device(t)} - {None}
        if on_device:
            out = tree_map(
                lambda t: (
                    _retagged(t)
                    if isinstance(t, torch.Tensor) and _storage_key(t) in on_device
                    else t
                ),
                out,
            )
        outs = [o for o in (out if isinstance(out, tuple | list) else (out,))]
        ctx = _ctx_of(cls, [o for o in outs if isinstance(o, torch.Tensor)])
        if ctx is not None:
            ctx._emulated_out = tuple(is_on_device(o) for o in outs)
            if not kwargs:  # backward returns one grad per positional forward argument
                ctx._emulated_in = tuple(
                    is_on_device(a) if isinstance(a, torch.Tensor) else None for a in args
                )
        return out

    return apply


def _save_noting_devices(original: Callable) -> Callable:
    def save_for_backward(ctx, *tensors):
        original(ctx, *tensors)
        ctx._emulated_saved = tuple(is_on_device(t) for t in tensors)

    return save_for_backward


def _saved_tensors(ctx) -> tuple:
    saved = _BASE_SAVED.__get__(ctx)
    tags = getattr(ctx, "_emulated_saved", None)
    if tags is None or len(tags) != len(saved):
        return saved
    return tuple(_retagged(t) if tag else t for t, tag in zip(saved, tags, strict=True))


def _checked_grads(ctx, result: Any) -> Any:
    """CUDA's engine refuses a grad on another device than its input (a 0-dim one it moves)."""
    devices = getattr(ctx, "_emulated_in", None)
    if devices is None:
        return result
    single = not isinstance(result, tuple)
    grads = list((result,) if single else result)
    for i, g in enumerate(grads):
        if i >= len(devices) or devices[i] is None or not isinstance(g, torch.Tensor):
            continue
        if devices[i] != is_on_device(g):
            if g.dim() == 0:
                grads[i] = _retagged(g) if devices[i] else plain(g).clone()
                continue
            want, got = ("cuda:0", "cpu") if devices[i] else ("cpu", "cuda:0")
            raise EmulatedDeviceError(
                f"Function {type(ctx).__name__} returned an invalid gradient at index {i} - "
                f"expected device {want} but got {got} (emulated CUDA)"
            )
    return grads[0] if single else tuple(grads)


def _backward_carrying_tags(original: Callable) -> Callable:
    def apply(ctx, *grads):
        outs = getattr(ctx, "_emulated_out", None)
        boxed = len(grads) == 1 and isinstance(grads[0], list)  # boxed_grads_call: one list
        flat = grads[0] if boxed else list(grads)
        flat[:] = [
            _retagged(g) if outs is None or (i < len(outs) and outs[i]) else g
            for i, g in enumerate(flat)
        ]
        grads = (flat,) if boxed else tuple(flat)
        with torch._C._EnableTorchFunction(), mode_on_this_thread():
            result = original(ctx, *grads)
        return _checked_grads(ctx, result)

    return apply


def _hook_on_device(original: Callable) -> Callable:
    """Hooks on a device tensor get device grads (the engine's grads are plain tensors)."""

    def register_hook(t, hook):
        if is_on_device(t) and not getattr(hook, "_emulated", False):
            inner = hook

            def hook(g):
                return inner(_retagged(g))

            hook._emulated = True
        return original(t, hook)

    return register_hook


def _patches() -> list[tuple[type, str, Any]]:
    boxed = [n for n in ("apply", "apply_boxed") if n in BackwardCFunction.__dict__]
    return [
        (torch.Tensor, "register_hook", _hook_on_device(torch.Tensor.register_hook)),
        (Function, "apply", classmethod(_apply_carrying_tags(Function.__dict__["apply"].__func__))),
        (FunctionCtx, "save_for_backward", _save_noting_devices(FunctionCtx.save_for_backward)),
        (BackwardCFunction, "saved_tensors", property(_saved_tensors)),
        *[
            (BackwardCFunction, n, _backward_carrying_tags(BackwardCFunction.__dict__[n]))
            for n in boxed
        ],
    ]


@contextlib.contextmanager
def tags_through_functions() -> Iterator[None]:
    """Install the patches above for the block (emulated_cuda enters this)."""
    patches = _patches()
    saved = [(owner, name, owner.__dict__.get(name, _ABSENT)) for owner, name, _ in patches]
    for owner, name, new in patches:
        setattr(owner, name, new)
    try:
        yield
    finally:
        for owner, name, old in saved:
            if old is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
