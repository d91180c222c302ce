# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Math grading with math-verify: is the last boxed answer equal to the ground truth?

Order of checks: no box -> wrong; equal after `normalize_text` (covers
`\\text{True}` vs `True`, `(c)`, TheoremQA's booleans that math-verify would
read as products of symbols) -> right; otherwise math-verify's symbolic
comparison (`18.0` = `18`, `\\frac12` = `0.5`, intervals, sets).

math-verify bounds parse and verify with `signal.alarm`, which exists only
in a process's main thread (in a thread it raises ValueError). Pass
`timeout_seconds=None` where the caller enforces its own timeout
(`clipo_megatron.verify.pool` does, with its own alarm inside worker
processes plus a hard kill).
"""

from __future__ import annotations

from clipo_megatron.verify.extract import clean_answer, last_boxed, normalize_text


def grade_math_answer(
    answer: str | None, ground_truth: str, *, timeout_seconds: int | None = 5
) -> bool:
    """True if an extracted answer equals the ground truth (string-normalised or math-verify)."""
    if answer is None or not answer.strip():
        return False
    gold = clean_answer(ground_truth)  # a full solution is graded against its answer
    if normalize_text(answer) == normalize_text(gold):
        return True
    from math_verify import parse, verify

    pkw = {} if timeout_seconds is not None else {"parsing_timeout": None}
    gold_p = parse(f"${gold}$", **pkw)
    pred_p = parse(f"${answer}$", **pkw)
    if not gold_p or not pred_p:
        return False
    vkw = {"timeout_seconds": timeout_seconds}
    return bool(verify(gold_p, pred_p, **vkw))


def verify_math(response: str, ground_truth: str, *, timeout_seconds: int | None = 5) -> float:
    """1.0 if the last `\\boxed{}` of `response` equals the ground truth, else 0.0 (main thread only
    unless `timeout_seconds=None`)."""
    return float(
        grade_math_answer(last_boxed(response), ground_truth, timeout_seconds=timeout_seconds)
    )
