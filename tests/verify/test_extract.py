# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Answer extraction edge cases: nested braces, several boxes, no box, \\text{} answers, letters."""

import pytest

from clipo_megatron.verify.choice import extract_choice, verify_choice
from clipo_megatron.verify.extract import all_boxed, last_boxed, normalize_text


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),  # nested braces survive
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("first \\boxed{3}, then \\boxed{4}", "4"),  # several boxes: the last one is graded
        ("\\boxed{5} and \\fbox{6}", "6"),  # \fbox counts as a box
        ("\\fbox{6} and \\boxed{5}", "5"),
        ("the answer is 18", None),  # no box
        ("\\boxed{18", None),  # unclosed box
        (
            "\\boxed{1} then \\boxed{2",
            "1",
        ),  # an unclosed last box does not hide a closed earlier one
        ("\\boxed{}", ""),
        ("\\boxed{\\text{Yes}}", "\\text{Yes}"),
        ("so $x = \\boxed 9$.", "9"),  # TeX's brace-less single token (two MATH train solutions)
        ("\\boxed 2. Or \\boxed{3}", "3"),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_all_boxed_in_order():
    assert all_boxed("\\fbox{a} x \\boxed{b{c}} \\boxed{d") == ["a", "b{c}"]


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("\\text{True}", "true"),
        ("\\text{ Yes. }", "yes"),
        ("$18$", "18"),
        ("\\textbf{\\text{(c)}}", "(c)"),
        ("42.", "42"),
    ],
)
def test_normalize_text(raw, expected):
    assert normalize_text(raw) == expected


@pytest.mark.parametrize(
    "answer, letter",
    [
        ("B", "B"),
        ("(B)", "B"),
        ("B.", "B"),
        ("B)", "B"),
        ("b", "B"),
        ("\\text{B}", "B"),
        ("\\text{(C)}", "C"),
        ("B. Paris", "B"),
        ("(D) mall", "D"),
        ("Option B", "B"),
        ("Answer: C", "C"),
        (" [E] ", "E"),
        ("T", "T"),
        ("A or B", None),
        ("A, B", None),
        ("AB", None),
        ("A/B", None),
        ("Paris", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_choice(answer, letter):
    assert extract_choice(answer) == letter


def test_verify_choice():
    assert verify_choice("I pick \\boxed{(B)}.", "B") == 1.0
    assert verify_choice("\\boxed{A} no wait \\boxed{B}", "B") == 1.0  # last box
    assert verify_choice("\\boxed{B}", "C") == 0.0
    assert verify_choice("B", "B") == 0.0  # no box: the paper grades boxed answers only
    with pytest.raises(ValueError, match="not a single option letter"):
        verify_choice("\\boxed{B}", "Paris")
