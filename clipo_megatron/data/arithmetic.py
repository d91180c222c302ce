# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Offline training task: reasoning-gym arithmetic with the paper's \\boxed{} instruction.

reasoning-gym generates problems and answers from a seed, so the CPU default
needs no download. A one-shot example in the prompt teaches a 135M model the
answer format; the paper's instruction suffix follows the question.
"""

from __future__ import annotations

from dataclasses import dataclass

from clipo_megatron.data.gym import ARITHMETIC_DEFAULTS
from clipo_megatron.data.templates import MATH

INSTRUCTION = MATH  # the paper's math instruction (appendix table)
SYSTEM = "You are a helpful assistant."
# One worked example as a previous chat turn teaches a 135M model the answer format.
ONE_SHOT = [("Calculate 4 + 3.", "4 + 3 = 7. The final answer is \\boxed{7}.")]


@dataclass(frozen=True)
class Problem:
    index: int
    prompt: str  # user message (question + instruction)
    answer: str
    few_shot: bool = True

    @property
    def messages(self) -> list[dict[str, str]]:
        """Chat messages: system, the worked example turns, then the question."""
        msgs = [{"role": "system", "content": SYSTEM}]
        if self.few_shot:
            for q, a in ONE_SHOT:
                msgs += [
                    {"role": "user", "content": f"{q}\n{INSTRUCTION}"},
                    {"role": "assistant", "content": a},
                ]
        return msgs + [{"role": "user", "content": self.prompt}]


def arithmetic_problems(
    size: int, seed: int, *, dataset: str = "basic_arithmetic", one_shot: bool = True, **gen_kwargs
) -> list[Problem]:
    """`size` problems from a reasoning-gym generator (default: 2 single-digit terms)."""
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
        Problem(i, f"{x['question']}\n{INSTRUCTION}", str(x["answer"]), one_shot)
        for i, x in enumerate(ds)
    ]
