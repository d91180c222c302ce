# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Multiple-choice grading: the boxed answer must name the ground-truth option letter.

The paper's MC prompts ask for a letter in `\\boxed{}` (MMLU A-D,
CommonsenseQA A-E, TruthfulQA up to T). Models decorate it: `(B)`, `B.`,
`\\text{B}`, `B) Paris`, `Option B`. `extract_choice` reads the letter from
those forms and refuses ambiguous ones (`A or B`, a bare word such as
`Paris`), which grade as wrong: exact letter matching, no fuzzy text match.
"""

from __future__ import annotations

import re

import clipo_megatron.verify.extract as extract
from clipo_megatron.verify.extract import last_boxed, normalize_text

# A single option letter, optionally bracketed or followed by `.`/`)`/`:` and the option text,
# optionally after "option"/"answer"/"choice". "AB" and "A, B" do not match.
_LETTER = re.compile(
    r"^(?:(?:OPTION|ANSWER|CHOICE)\s*:?\s*)?[\(\[]?([A-Z])[\)\]]?[.:)]?(?:\s+(.*))?$"
)
_SECOND_CHOICE = re.compile(r"^(?:OR|AND|/|&)\s")


def extract_choice(answer: str | None) -> str | None:
    """The option letter an answer names, or None (no answer, or not exactly one letter)."""
    if answer is None:
        return None
    s = re.sub(r"\s+", " ", normalize_text(answer).upper()).strip()
    m = _LETTER.match(s)
    if m is None:
        return None
    if m.group(2) and _SECOND_CHOICE.match(m.group(2) + " "):  # "A or B": two answers, none counts
        return None
    return m.group(1)


def graded_answer(response: str, kind: str) -> str | None:
    """What the grader reads: the last box (math) or the option letter in it (mc)."""
    box = extract.last_boxed(response)  # by the module: a test traps it where it runs
    return extract_choice(box) if kind == "mc" else box


def verify_choice(response: str, ground_truth: str) -> float:
    """1.0 if the last boxed answer of `response` names the letter `ground_truth`, else 0.0."""
    gold = extract_choice(str(ground_truth))
    if gold is None:
        raise ValueError(
            f"multiple-choice ground truth {ground_truth!r} is not a single option letter"
        )
    return float(extract_choice(last_boxed(response)) == gold)
