# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Offline training task: reasoning-gym arithmetic with the paper's \\boxed{} instruction.

reasoning-gym generates problems and answers from a seed, so the CPU default
needs no download. A one-shot example in the prompt teaches a 135M model the
answer format; the paper's instruction suffix follows the question.
"""

from __future__ import annotations

from clipo_megatron.data.gym import ARITHMETIC_DEFAULTS
from clipo_megatron.data.records import Record
from clipo_megatron.data.templates import build_prompt


def arithmetic_problems(
    size: int, seed: int, *, dataset: str = "basic_arithmetic", one_shot: bool = True, **gen_kwargs
) -> list[Record]:
    """`size` problems from a reasoning-gym generator (default: 2 terms in 0..10)."""
    try:
        import reasoning_gym
    except ImportError as e:  # pragma: no cover
        raise ImportError("the CPU demo task needs reasoning-gym: pip install reasoning-gym") from e
    if size < 1:
        raise ValueError(f"size={size} must be >= 1")
    if dataset == "basic_arithmetic":  # mixed groups on a 135M model, so CLIPO has signal
        gen_kwargs = {**ARITHMETIC_DEFAULTS, **gen_kwargs}
    ds = reasoning_gym.create_dataset(dataset, seed=seed, size=size, **gen_kwargs)
    return [
        Record(
            build_prompt(x["question"], "basic_arithmetic"),
            str(x["answer"]),
            "math",
            f"gym:{dataset}",
            i,
            "basic_arithmetic",
            few_shot=one_shot,
        )
        for i, x in enumerate(ds)
    ]
