# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Updates skipped for a non-finite loss or grad norm: counted, and the run stopped after K.

The policy update (`runner/passes.py`) and the head's (`megatron/head_trainer.py`) each skip
a step whose loss or gradients are not finite, leaving weights and AdamW moments as they
were, and say so in the step's metrics. One skip is noise (an overflow on one batch); K in a
row (`train.max_nonfinite_skips`) is a knob that poisons every step, and training on would
only burn the budget. This module counts the skips over the run's history and stops it in
one line naming the step and the knob most likely at fault.
"""

from __future__ import annotations

import math

# The step's flags: the policy update skipped, the head update skipped (each 0 / 1).
SKIP_KEYS = ("train/skipped_nonfinite", "clipo/head_skipped_nonfinite")
COUNT_KEY = "train/nonfinite_skips"  # skipped steps so far in the run


class NonFiniteStop(RuntimeError):
    """K consecutive updates skipped: the run stops (the message is the one line to print)."""


def skipped(m: dict) -> bool:
    return any(m.get(k, 0.0) for k in SKIP_KEYS)


def count(history: list[dict]) -> int:
    """Record the run's skipped steps so far in the last step's metrics (`COUNT_KEY`)."""
    prev = history[-2].get(COUNT_KEY, 0.0) if len(history) > 1 else 0.0
    history[-1][COUNT_KEY] = float(prev) + float(skipped(history[-1]))
    return int(history[-1][COUNT_KEY])


def streak(history: list[dict]) -> int:
    """Consecutive skipped steps at the end of `history`."""
    n = 0
    for m in reversed(history):
        if not skipped(m):
            break
        n += 1
    return n


def likely_knob(m: dict) -> str:
    """The knob most likely at fault, read from which number went non-finite first."""
    if m.get("clipo/head_skipped_nonfinite"):
        return "clipo.method.temperature or clipo.method.head_lr (the head's loss or gradient)"
    if not math.isfinite(m.get("reward/clipo_mean", 0.0)):
        return "clipo.method.reward_lambda or clipo.method.reward_constant (r_CL)"
    return "train.lr or train.grad_clip (the policy's loss or gradient)"


def check(history: list[dict], k: int, saved_at: int) -> None:
    """Raise `NonFiniteStop` when the last `k` steps all skipped their update."""
    if not history or streak(history) < k:
        return
    m = history[-1]
    shown = ", ".join(
        f"{key}={m[key]:.4g}"
        for key in ("pg/loss", "pg/grad_norm", "clipo/loss")
        if isinstance(m.get(key), float)
    )
    raise NonFiniteStop(
        f"step {m.get('step', len(history) - 1)}: {k} consecutive updates skipped for a "
        f"non-finite loss or grad norm ({shown}); likely knob: {likely_knob(m)}. The weights "
        f"are those before the skips; the last checkpoint is step {saved_at}: fix the knob and "
        "rerun (train.max_nonfinite_skips sets how many skips stop a run)"
    )
