# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The allowed values of CLIPO's method knobs (`clipo.method.*`): choices and numeric ranges.

`CLIPOConfig` (core/config.py) checks its fields against these tables at construction. They
sit in their own module so config.py reads as the list of knobs and what each one means, and
what each knob may be is one table to read or change (the `Range` rules are core/bounds.py's).
"""

from __future__ import annotations

from clipo_megatron.core.bounds import Range

# The key the method block has in both drivers' configs: errors name it, not the class.
METHOD_KEY = "clipo.method"

METHOD_CHOICES: dict[str, tuple[str, ...]] = {
    "similarity": ("cosine", "dot"),
    "anchors": ("correct", "all", "incorrect"),
    "denominator": ("all_others", "positive_and_negatives"),
    "head_type": ("linear", "mlp"),
}

# The method's numeric knobs and their ranges: the one home of these rules (both drivers).
# tau: the logits are cos / tau, so 1 / tau must stay far inside fp32; lambda, the constant
# and the floor: r_CL = max(c - lambda * L, clip_min) stays finite for the losses tau allows.
METHOD_RANGES: dict[str, Range] = {
    "temperature": Range(1e-3, 10, note="paper 0.05, ablated 0.02 - 0.2"),
    "reward_lambda": Range(0, 100),
    "reward_clip_min": Range(-100, 0, note="a floor on a penalty; paper -0.5"),
    "reward_constant": Range(-100, 100, note="paper 0"),
    "embed_dim": Range(1, 65536, integer=True, note="paper 512 / 2048"),
    "head_lr": Range(0, 1, note="paper 1e-3"),
    "head_weight_decay": Range(0, 1, note="paper 0.01"),
    "warmup_steps": Range(0, integer=True),
    "seed": Range(0, 2**31 - 1, integer=True),
    "max_group_size": Range(2, integer=True, note="or null"),
    "log_eps": Range(0, 1e-2, note="0: off; the authors' code: 1e-8"),
}
# Knobs whose null (None) means "the default follows the loss / no bound", so skip the range.
NULLABLE_KNOBS = frozenset({"reward_lambda", "max_group_size"})
