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


# Adversarial inputs: a scan to the end of the text per `\boxed{` is quadratic (140k characters
# took 102 s); one pass over the braces is linear. The timeout turns a return to the quadratic
# scan red (1M characters: hours) without asserting a time.
@pytest.mark.timeout(120)
@pytest.mark.parametrize("copies", [20_000, 142_858])  # 140k and 1M characters
def test_last_boxed_on_unclosed_boxes(copies):
    text = "\\boxed{" * copies
    assert last_boxed(text) is None
    assert last_boxed(text + "\\boxed{7}") == "7"
    assert last_boxed("\\boxed{7}" + text) == "7"  # the last *closed* box


@pytest.mark.timeout(120)
def test_last_boxed_on_deeply_nested_boxes():
    n = 71_429  # 1M characters of openers and closers
    text = "\\boxed{" * n + "x" + "}" * n
    assert last_boxed(text) == "x"  # the innermost box starts last
    assert last_boxed("\\fbox{" + text + "}") == "x"
    assert last_boxed("{" * 1_000_000) is None


def test_last_boxed_visits_each_brace_once(monkeypatch):
    """The step count behind the linear cost: one visit per brace, whatever the nesting."""
    from clipo_megatron.verify import extract

    visits = []
    real = extract._BRACE

    class Counting:
        def finditer(self, text):
            for m in real.finditer(text):
                visits.append(m.start())
                yield m

    monkeypatch.setattr(extract, "_BRACE", Counting())
    for text in ["\\boxed{" * 500, "\\boxed{" * 300 + "}" * 300, "a{b}\\boxed{{c}}" * 50]:
        visits.clear()
        last_boxed(text)
        assert len(visits) == text.count("{") + text.count("}")


def test_last_boxed_agrees_with_a_naive_reference():
    """Random mixes of boxes, braces and bare `\\boxed x` against the scan-per-opener rule."""
    import random

    def naive(text):
        found = []
        for opener in ("\\boxed{", "\\fbox{"):
            i = text.find(opener)
            while i >= 0:
                depth, j = 1, i + len(opener)
                while j < len(text) and depth:
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    j += 1
                if depth == 0:
                    found.append((i, text[i + len(opener) : j - 1]))
                i = text.find(opener, i + 1)
        found += [(m.start(), m.group(1).rstrip(".,")) for m in extract_bare.finditer(text)]
        return max(found)[1] if found else None

    import re

    extract_bare = re.compile(r"\\boxed +([^\s${}]+)")
    rng = random.Random(0)
    toks = ["\\boxed{", "\\fbox{", "{", "}", "}", "x", "1", " ", "\\boxed ", "\\boxed 9.", ","]
    for _ in range(5000):
        text = "".join(rng.choice(toks) for _ in range(rng.randint(0, 12)))
        assert last_boxed(text) == naive(text), text
