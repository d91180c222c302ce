# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Where a tensor goes under `emulated_cuda()`: device specs, moves, factories, `Module.to`.

Every spelling NeMo-RL and Megatron-Core use lands on the emulated device: `.cuda()`,
`.to("cuda" / "cuda:0" / 0 / torch.device("cuda", 0) / torch.cuda.current_device())`,
`.to(device=..., dtype=..., non_blocking=True, copy=True)`, `.to(other_tensor)`, factories with
`device=` one of those, `Module.to(...)`. A move to the device is a copy (as on a GPU: writing
the device tensor never changes the host one); `non_blocking` means nothing on one host;
`"meta"` and other devices are left alone; bools in `.to(dtype, non_blocking, copy)` are not
device ordinals.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from clipo_testkit import emulated_tags as tags


def is_cuda_device(d: Any) -> bool | None:
    """True for a CUDA device spec, False for a CPU one, None for none or another ("meta")."""
    if isinstance(d, int) and not isinstance(d, bool):  # bools: .to's non_blocking / copy
        return True
    kind = d.split(":")[0] if isinstance(d, str) else d.type if isinstance(d, torch.device) else ""
    return {"cuda": True, "cpu": False}.get(kind)


def device_target(func, args, kwargs) -> bool | None:
    """For .to / .cuda / .cpu: True to the device, False to the host, None: stays."""
    name = getattr(func, "__name__", "")
    if name == "cuda":
        return True
    if name == "cpu":
        return False
    if name == "to":
        spec = kwargs.get("device")
        if spec is None:
            for a in args[1:]:
                if isinstance(a, torch.Tensor):  # .to(other): other's device
                    return tags.is_on_device(a)
                if is_cuda_device(a) is not None:
                    return is_cuda_device(a)
        return is_cuda_device(spec)
    return None


def _same_call_on_host(args, kwargs) -> dict:
    """The .to call's keywords without its device (dtype / copy / memory_format kept):
    .to(device, dtype, non_blocking, copy), .to(dtype, non_blocking, copy), .to(other, ...)."""
    kw = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking")}
    pos = list(args[1:])
    names = ["dtype", "non_blocking", "copy"]
    if pos and isinstance(pos[0], torch.Tensor):
        kw.setdefault("dtype", pos.pop(0).dtype)
        names = names[1:]
    elif pos and is_cuda_device(pos[0]) is not None:
        pos.pop(0)
    kw.update({n: v for n, v in zip(names, pos) if v is not None and n != "non_blocking"})
    return kw


def move(func, args, kwargs, to_device: bool):
    t = args[0]
    kw = (
        {} if getattr(func, "__name__", "") in ("cuda", "cpu") else _same_call_on_host(args, kwargs)
    )
    with torch._C.DisableTorchFunctionSubclass():
        base = tags.plain(t)
        out = base.to(**kw) if kw else base
        if to_device:
            if tags.is_on_device(t) and out is base:
                return t
            return tags.own(out.clone() if out is base else out)
        return out.clone() if tags.is_on_device(t) and out is base else out


def factory(func, args, kwargs):
    """A call with device= (factories, new_*, *_like): made on the host, tagged if for cuda."""
    out = func(*args, **{**kwargs, "device": "cpu"})
    if not is_cuda_device(kwargs["device"]):
        return tree_map(tags.untag_if_tensor, out)
    given = {id(t) for t in tags.tensors_in(args, kwargs) if not tags.is_on_device(t)}
    return tree_map(lambda t: tags.own(t.clone() if id(t) in given else t), out)  # as_tensor(h)


def parse_to(func, args, kwargs):
    """Module.to(0 / "cuda", ...): parsed on the host, answered with cuda:0."""
    cuda = any(is_cuda_device(a) for a in (*args, kwargs.get("device")))
    args = tuple("cpu" if is_cuda_device(a) else a for a in args)
    if is_cuda_device(kwargs.get("device")):
        kwargs = {**kwargs, "device": "cpu"}
    device, *rest = func(*args, **kwargs)
    return (tags.CUDA if cuda else device, *rest)


def apply_swapping(apply: Callable) -> Callable:
    """`Module._apply` (`.to`, `.cuda`, `.float`, ...) with torch's swap of parameters on: a
    parameter moved to the device keeps its device tag (`param.data = x` would drop the subclass).
    Scoped to the conversion: `load_state_dict` keeps copying into the parameters in place, as on
    a GPU (a parameter that views Megatron-Core's DDP buffer keeps viewing it)."""

    @functools.wraps(apply)
    def applied(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        before = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            return apply(self, *args, **kwargs)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(before)

    return applied


def swap_keeping_attributes(swap: Callable[[torch.Tensor, torch.Tensor], None]) -> Callable:
    """`torch.utils.swap_tensors` as `Module.to` uses it here (the emulation turns the swap on so
    a parameter keeps its device tag): the parameter also keeps its own Python attributes
    (Megatron-Core's `shared`, `tensor_model_parallel`, `sequence_parallel`), as `param.data = x`
    keeps them on a GPU; torch's swap alone hands it the new tensor's, which has none."""

    @functools.wraps(swap)
    def swapped(t1: torch.Tensor, t2: torch.Tensor) -> None:
        kept = dict(t1.__dict__)
        swap(t1, t2)
        for k, v in kept.items():
            t1.__dict__.setdefault(k, v)

    return swapped
