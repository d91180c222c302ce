# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Capture pooled response hidden states inside the logprob forward.

No second forward over the policy: the final hidden states (output of the
final norm, input of the output layer, [S(/TP with SP), B, D] or
[T_local, 1, D] packed) are pooled into [B, D] partial sums *while* the
forward that computes logits runs, and only the sums are kept, never the
[S, B, D] tensor.

Two mechanisms, chosen by what the installed megatron-core supports:
- megatron-core >= 0.18: `GPTModel.forward(..., output_processor=...)`; our
  processor pools, then computes the logits exactly as GPTModel does;
- older releases (and any model class): a forward hook on
  `decoder.final_layernorm`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable

import torch

PoolFn = Callable[[torch.Tensor], torch.Tensor]  # final hidden states -> [B, D] sums


def supports_output_processor(model) -> bool:
    return "output_processor" in inspect.signature(type(model).forward).parameters


class PooledCapture:
    """Holds the pooled sums of one forward; use `.output_processor` or `.hook(model)`."""

    def __init__(self, pool_fn: PoolFn):
        self.pool_fn = pool_fn
        self.sums: torch.Tensor | None = None

    def _pool(self, hidden: torch.Tensor) -> None:
        with torch.no_grad():
            self.sums = self.pool_fn(hidden.detach())

    def output_processor(
        self,
        *,
        hidden_states,
        output_layer,
        output_weight=None,
        runtime_gather_output=None,
        scale_logits=None,
        **_,
    ):
        """megatron-core >= 0.18 hook: pool, then the standard logits path ([B, S, V])."""
        self._pool(hidden_states)
        logits, _ = output_layer(
            hidden_states, weight=output_weight, runtime_gather_output=runtime_gather_output
        )
        if scale_logits is not None:
            logits = scale_logits(logits)
        return logits.transpose(0, 1).contiguous()

    @contextlib.contextmanager
    def hook(self, model):
        """Forward hook on the final norm (every megatron-core release)."""
        norm = getattr(getattr(model, "decoder", None), "final_layernorm", None)
        if norm is None:
            raise ValueError(
                "model has no decoder.final_layernorm: is this the post-process stage?"
            )
        handle = norm.register_forward_hook(lambda _m, _i, out: self._pool(out))
        try:
            yield self
        finally:
            handle.remove()


def forward_with_capture(model, pool_fn: PoolFn, *args, mode: str = "auto", **kwargs):
    """Run `model(*args, **kwargs)` once; return (its output, pooled sums [B, D]).

    mode: "auto" (output_processor when available), "output_processor" or "hook".
    """
    cap = PooledCapture(pool_fn)
    if mode == "auto":
        mode = "output_processor" if supports_output_processor(model) else "hook"
    if mode == "output_processor":
        if not supports_output_processor(model):
            raise ValueError(
                "this megatron-core has no GPTModel.forward(output_processor=...); use mode='hook'"
            )
        out = model(*args, output_processor=cap.output_processor, **kwargs)
    elif mode == "hook":
        with cap.hook(model):
            out = model(*args, **kwargs)
    else:
        raise ValueError(f"mode={mode!r} must be 'auto', 'output_processor' or 'hook'")
    if cap.sums is None:
        raise RuntimeError("the forward did not reach the final norm (no hidden states captured)")
    return out, cap.sums
