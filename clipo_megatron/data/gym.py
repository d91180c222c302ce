# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Offline problems from reasoning-gym generators (PyPI), for CPU runs without any data.

`gsm_symbolic` instantiates the GSM-Symbolic templates (the family of the
paper's SYM / P1 / P2 benchmarks) with fresh numbers; `basic_arithmetic`
is the CPU demo's task. Same seed, same problems.
"""

from __future__ import annotations

from clipo_megatron.data.records import Record
from clipo_megatron.data.registry import DatasetSpec
from clipo_megatron.data.templates import build_prompt

# The CPU demo's arithmetic: two terms in 0..10, + and -, so a 135M model gets a fair share right.
ARITHMETIC_DEFAULTS = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ("+", "-"),
    "allow_parentheses": False,
    "allow_negation": False,
}


def load_gym(spec: DatasetSpec, size: int, seed: int, **kwargs) -> list[Record]:
    if spec.gym is None:
        raise FileNotFoundError(
            f"{spec.name!r} has no offline generator; generators exist for "
            f"gsm_symbolic and basic_arithmetic"
        )
    if size < 1:
        raise ValueError(f"a generated dataset needs size >= 1 (got {size}): pass --limit")
    try:
        import reasoning_gym
    except ImportError as e:
        raise FileNotFoundError(
            "offline generators need reasoning-gym: pip install reasoning-gym"
        ) from e
    if spec.gym == "basic_arithmetic":
        kwargs = {**ARITHMETIC_DEFAULTS, **kwargs}
    ds = reasoning_gym.create_dataset(spec.gym, seed=seed, size=size, **kwargs)
    return [
        Record(
            build_prompt(x["question"], spec.name),
            str(x["answer"]),
            spec.kind,
            f"gym:{spec.gym}",
            i,
            spec.name,
        )
        for i, x in enumerate(ds)
    ]
