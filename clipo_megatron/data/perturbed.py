# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A perturbed held-out set for the CPU task: a robustness check beside the in-distribution one.

The training task is two terms in 0..10 (`data/arithmetic.py`). In the spirit of
GSM-Symbolic P1 / P2 (more clauses) and Math-Perturb (the same skill under changed
surface), each problem here changes the task in one or two ways, cycling by index:

    terms               three single-digit terms       "Calculate 4 + 3 - 8."
    digits              two terms in 11..99            "Calculate 47 - 15."
    terms+distractor    three terms and an irrelevant sentence with a number in it
    digits+distractor   two-digit terms and an irrelevant sentence

Every problem has a third term or two numbers above 10 (reasoning-gym's "single-digit"
training terms reach 10), so none is a training problem.
Generated offline from a seed with `random.Random(seed).random()` alone (the one
method whose sequence Python keeps fixed across versions); answers are exact integers.
"""

from __future__ import annotations

import random

from clipo_megatron.data.records import Record
from clipo_megatron.data.templates import build_prompt

PERTURBATIONS = ("terms", "digits", "terms+distractor", "digits+distractor")
DATA_SOURCE = "perturbed:basic_arithmetic"

# Irrelevant facts with a number in them (GSM-NoOp / P2 style): the number must not be used.
DISTRACTORS = (
    "A box on the shelf holds {n} pencils.",
    "Tom walked {n} minutes to school this morning.",
    "The library has {n} new books this week.",
    "There are {n} birds sitting on the fence.",
    "Mia's train leaves from platform {n}.",
    "The garden has {n} tulips in a row.",
)


def _pick(rng: random.Random, k: int) -> int:
    """An integer in [0, k) from `rng.random()` (stable across Python versions, unlike randrange)."""
    return min(int(rng.random() * k), k - 1)


def perturbed_problem(rng: random.Random, kind: str) -> tuple[str, int]:
    """(question, exact answer) for one perturbation kind."""
    if kind not in PERTURBATIONS:
        raise ValueError(f"perturbation {kind!r} is not one of {PERTURBATIONS}")
    if kind.startswith("terms"):
        terms = [_pick(rng, 10) for _ in range(3)]
    else:
        terms = [11 + _pick(rng, 89) for _ in range(2)]
    ops = ["+" if _pick(rng, 2) == 0 else "-" for _ in terms[1:]]
    expr, answer = str(terms[0]), terms[0]
    for op, t in zip(ops, terms[1:]):
        expr += f" {op} {t}"
        answer += t if op == "+" else -t
    question = f"Calculate {expr}."
    if kind.endswith("+distractor"):
        sentence = DISTRACTORS[_pick(rng, len(DISTRACTORS))].format(n=2 + _pick(rng, 98))
        question = f"{sentence} {question}"
    return question, answer


def perturbed_arithmetic(size: int, seed: int, *, one_shot: bool = True) -> list[Record]:
    """`size` perturbed problems at `seed`; problem i has kind PERTURBATIONS[i % 4]."""
    if size < 1:
        raise ValueError(f"size={size} must be >= 1")
    rng = random.Random(seed)
    records = []
    for i in range(size):
        question, answer = perturbed_problem(rng, PERTURBATIONS[i % len(PERTURBATIONS)])
        records.append(
            Record(
                build_prompt(question, "basic_arithmetic"),
                str(answer),
                "math",
                DATA_SOURCE,
                i,
                "basic_arithmetic",
                few_shot=one_shot,
            )
        )
    return records


def perturbation_of(record: Record) -> str:
    """The kind of a problem from `perturbed_arithmetic` (it cycles with the index)."""
    return PERTURBATIONS[record.index % len(PERTURBATIONS)]
