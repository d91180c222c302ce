# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""math-verify grading of boxed answers (main thread: its signal timeouts work here)."""

import threading

import pytest

pytest.importorskip("math_verify")
pytestmark = pytest.mark.runner

from clipo_megatron.verify.math import grade_math_answer, verify_math  # noqa: E402


@pytest.mark.parametrize(
    "response, gt, score",
    [
        ("... so she makes \\boxed{18} dollars", "18", 1.0),
        ("\\boxed{18.0}", "18", 1.0),  # numeric equality, not string
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{\\dfrac12}", "\\frac{1}{2}", 1.0),
        ("\\boxed{17}", "18", 0.0),
        ("18", "18", 0.0),  # no box, no credit
        ("\\boxed{3} wait \\boxed{18}", "18", 1.0),  # last box
        ("\\boxed{18} wait \\boxed{3}", "18", 0.0),
        ("\\boxed{\\text{True}}", "True", 1.0),  # TheoremQA booleans: string-normalised
        ("\\boxed{False}", "True", 0.0),
        ("\\boxed{[0, 5]}", "[0, 5]", 1.0),
        ("\\boxed{(c)}", "(c)", 1.0),
        ("\\boxed{}", "0", 0.0),
        ("\\boxed{x}", "The sum is \\boxed{x}.", 1.0),  # a full-solution ground truth: its last box
    ],
)
def test_verify_math(response, gt, score):
    assert verify_math(response, gt) == score


def test_math_verify_timeouts_fail_in_threads_unless_disabled():
    """Why the pool exists: math-verify's default (signal) timeouts raise in a thread."""
    out = {}

    def body():
        try:
            verify_math("\\boxed{1.0}", "1")  # not string-equal: reaches math-verify
        except ValueError as e:
            out["err"] = str(e)
        out["no_timeout"] = verify_math("\\boxed{1}", "1", timeout_seconds=None)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert "threaded" in out["err"] and out["no_timeout"] == 1.0
    assert grade_math_answer(None, "1") is False
