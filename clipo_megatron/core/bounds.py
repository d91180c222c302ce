# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Numeric bounds of the knobs both drivers share: finite, sign, range, one error line.

A knob out of range does not fail where it is read: `reward_lambda=1e300` turns into
0 * inf = NaN on the non-anchor rows, `grad_clip=-1` flips every gradient (gradient
ascent), a sampling temperature <= 0 silently samples greedily. So every knob is checked
against its `Range` before any model loads, and the error names the dotted key and the
allowed range. The method's own knobs are bounded in `core/config.py` (`METHOD_RANGES`); the
rules here are the ones the `clipo:` block (`core/config.py`), the runner (`runner/config.py`)
and the NeMo-RL driver (`nemo_rl/config.py`) share, under their own key names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """A closed / open interval of finite numbers (or ints); None: unbounded on that side."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    note: str = ""  # why the bound / the paper's value, appended to the error

    def holds(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if isinstance(value, float) and not math.isfinite(value):  # an int is finite (10**400 too)
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def text(self) -> str:
        """e.g. "a finite number in (0, 10]", "an int >= 1"."""
        kind = "an int" if self.integer else "a finite number"
        lo, hi = (
            None if x is None else f"{x}" if self.integer else f"{x:g}" for x in (self.lo, self.hi)
        )
        if lo is not None and hi is not None:
            return (
                f"{kind} in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
            )
        if lo is not None:
            return f"{kind} {'>' if self.lo_open else '>='} {lo}"
        if hi is not None:
            return f"{kind} {'<' if self.hi_open else '<='} {hi}"
        return kind

    def check(self, key: str, value: Any) -> None:
        """ValueError `<key>=<value> must be <range> (<note>)` unless `value` is in range."""
        if not self.holds(value):
            note = f" ({self.note})" if self.note else ""
            raise ValueError(f"{key}={value!r} must be {self.text()}{note}")


# Rollouts per prompt (the group size G). CLIPO's head compares every pair of a group:
# similarities and masks [N, G, G] grow as G^2, and one step generates prompts x G rows;
# 1024 is 64x the paper's 16 and still a few MB per group.
ROLLOUTS_PER_PROMPT = Range(
    2, 1024, integer=True, note="a group needs >= 2 rollouts; the head's [G, G] terms grow as G^2"
)
# RL steps of a run (the runner's train.steps adds a sanity upper bound of its own).
RL_STEPS = Range(1, integer=True)
# Sampling temperature of training rollouts: <= 0 is greedy (every rollout of a group alike,
# no advantage), and vLLM / HF treat it differently; above 10 the samples are noise.
ROLLOUT_TEMPERATURE = Range(0, 10, lo_open=True, note="training rollouts need sampling; paper 1.0")
# Evaluation may be greedy (0).
EVAL_TEMPERATURE = Range(0, 10, note="0 is greedy; paper 0.6")
TOP_P = Range(0, 1, lo_open=True)
# The policy's optimizer. lr > 1 and lr * weight_decay > 1 flip AdamW's decoupled decay.
LEARNING_RATE = Range(0, 1, lo_open=True)
WEIGHT_DECAY = Range(0, 1)
# Clipping to a negative bound multiplies every gradient by a negative number (ascent);
# 0 zeroes them.
GRAD_CLIP = Range(0, lo_open=True, note="the global grad-norm bound; paper 1.0")
CLIP_EPS = Range(0, 10, note="the ratio's clip range; paper 0.2 / 0.28")
KL_COEF = Range(0, 100, note="paper GRPO 0.001")


def bool_problem(key: str, value: Any) -> str | None:
    """The switch rule: `<key>=<value> must be true or false` unless `value` is a bool (a string
    there, "no" or "false", would be truthy)."""
    return None if isinstance(value, bool) else f"{key}={value!r} must be true or false"
