# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`grader: paper` gives the authors' verdicts; the table records where math-verify differs.

The `authors` column is the authors' checker itself, run outside this project (never copied into
it): Qwen-Applications/CLIPO 13c5fd6, its `verl/utils/reward_score/conrl_reward.py` loaded by path
in a venv with sympy 1.14.0 and pylatexenc 2.10 and called as the trainer calls it,
`compute_score("conrl/mmlu2k" | "conrl/math", response, ground_truth)` (docs/reproduce.md, "The
grader", says how to rerun it). The LaTeX forms are tests/verify/test_paper_latex_forms.py.

The `math_verify` column is the project's recommended grader (verify/math.py + choice.py).
"""

from __future__ import annotations

import pytest

from clipo_megatron.verify.paper import boxed_answer, grade_paper
from clipo_megatron.verify.paper_normalize import normalize_mathd, normalize_sympy

# id, response, ground truth, kind, authors' verdict, math-verify's verdict
FORMS = [
    ("mc_letter", r"The answer is \boxed{B}.", "B", "mc", 1, 1),
    ("mc_parens", r"\boxed{(B)}", "B", "mc", 0, 1),
    ("mc_text", r"\boxed{\text{B}}", "B", "mc", 0, 1),
    ("mc_letter_paren_text", r"\boxed{B) Paris}", "B", "mc", 0, 1),
    ("mc_option_word", r"\boxed{Option B}", "B", "mc", 0, 1),
    ("mc_lower", r"\boxed{b}", "B", "mc", 0, 1),
    ("mc_textbf", r"\boxed{\textbf{B}}", "B", "mc", 0, 1),
    ("mc_letter_dot_text", r"\boxed{B. Paris}", "B", "mc", 1, 1),
    ("mc_spaces", r"\boxed{ B }", "B", "mc", 1, 1),
    ("mc_wrong_letter", r"\boxed{A}", "B", "mc", 0, 0),
    ("mc_fbox", r"\fbox{B}", "B", "mc", 0, 1),
    ("mc_after_think", r"<think>maybe \boxed{A}</think> Final: \boxed{B}", "B", "mc", 1, 1),
    ("frac_unreduced", r"\boxed{\frac{2}{4}}", r"\frac{1}{2}", "math", 0, 1),
    ("boxed_no_braces", r"so \boxed 3", "3", "math", 0, 1),
    ("near_integer", r"\boxed{2.0000001}", "2", "math", 1, 0),
    ("integer", r"\boxed{18}", "18", "math", 1, 1),
    ("integer_dot_zero", r"\boxed{18.0}", "18", "math", 1, 1),
    ("gold_dot_zero", r"\boxed{142}", "142.0", "math", 1, 1),
    ("decimal_half", r"\boxed{0.5}", r"\frac{1}{2}", "math", 1, 1),
    ("dfrac", r"\boxed{\dfrac{1}{2}}", r"\frac12", "math", 1, 1),
    ("slash_fraction", r"\boxed{1/2}", r"\frac{1}{2}", "math", 1, 1),
    ("decimal_vs_frac", r"\boxed{3.5}", r"\frac{7}{2}", "math", 1, 1),
    ("unit_text", r"\boxed{5 \text{ cm}}", "5", "math", 1, 1),
    ("unit_word", r"\boxed{18 dollars}", "18", "math", 0, 0),
    ("percent", r"\boxed{10\%}", "10", "math", 1, 1),
    ("dollar", r"\boxed{\$18}", "18", "math", 1, 1),
    ("thousands_comma", r"\boxed{1,000}", "1000", "math", 1, 1),
    ("equation", r"\boxed{x = 5}", "5", "math", 1, 1),
    ("tuple_pi", r"\boxed{(3, \frac{\pi}{2})}", r"\left( 3, \frac{\pi}{2} \right)", "math", 1, 1),
    ("interval_ends", r"\boxed{(2, 5)}", "[2,5)", "math", 0, 0),
    ("sqrt_over_2", r"\boxed{\sqrt{2}/2}", r"\frac{\sqrt{2}}{2}", "math", 1, 1),
    ("sqrt_simplify", r"\boxed{2\sqrt{3}}", r"\sqrt{12}", "math", 1, 1),
    ("frac_denominator_sum", r"\boxed{\frac{1}{x+2}}", r"\frac{1}{x+2}", "math", 1, 1),
    # their LaTeX-to-text step prints \frac{1}{x+2} as 1/x+2, which sympy reads as 1/x + 2
    ("frac_vs_slash_parens", r"\boxed{1/(x+2)}", r"\frac{1}{x+2}", "math", 0, 1),
    ("text_true", r"\boxed{\text{True}}", "True", "math", 1, 1),
    ("fbox", r"\fbox{3}", "3", "math", 0, 1),
    ("unclosed_box", r"\boxed{3", "3", "math", 0, 0),
    ("last_box_wins", r"\boxed{2} no, \boxed{3}", "3", "math", 1, 1),
    ("last_box_bare", r"\boxed{3} or \boxed 4", "3", "math", 0, 0),
    ("box_only_in_think", r"<think>\boxed{3}</think>The answer is three.", "3", "math", 0, 1),
    ("degrees", r"\boxed{30^\circ}", "30", "math", 1, 1),
    ("gold_solution", r"\boxed{7}", r"So $x = \boxed{7}$.", "math", 1, 1),
]
IDS = [f[0] for f in FORMS]


def test_the_table_covers_the_issues_forms():
    assert len(FORMS) >= 27
    issue = {"mc_parens", "mc_text", "mc_letter_paren_text", "mc_option_word", "mc_lower"}
    issue |= {"mc_textbf", "frac_unreduced", "boxed_no_braces", "near_integer"}
    assert issue <= set(IDS)


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_paper_grader_gives_the_authors_verdict(form):
    _, response, gt, kind, authors, _ = form
    assert grade_paper(response, gt, kind) == float(authors)


@pytest.mark.runner
@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_math_verify_column(form):
    """The recommended grader's verdicts as docs/reproduce.md's table prints them."""
    pytest.importorskip("math_verify")
    from clipo_megatron.verify.graders import grade_one

    _, response, gt, kind, _, math_verify = form
    assert grade_one(response, gt, kind) == float(math_verify)


def test_the_two_graders_differ_where_the_issue_says():
    """Rows where exactly one grader accepts: the issue's list, both directions."""
    paper_only = {f[0] for f in FORMS if f[4] and not f[5]}
    math_verify_only = {f[0] for f in FORMS if f[5] and not f[4]}
    assert paper_only == {"near_integer"}
    assert {"mc_parens", "mc_text", "mc_lower", "frac_unreduced", "boxed_no_braces"} <= (
        math_verify_only
    )


@pytest.mark.parametrize(
    "text, box",
    [
        (r"a \boxed{\frac{1}{2}} b", r"\frac{1}{2}"),  # nested braces survive
        (r"\boxed{1} \boxed{2}", "2"),  # the last box
        (r"\boxed 3", None),  # no braces: no answer
        (r"\boxed{2} \boxed 3", None),  # the last `\boxed` decides, and it has no braces
        (r"\fbox{3}", None),  # located by their scan, never unwrapped
        (r"\boxed{3", None),  # unclosed
        ("no box", None),
    ],
)
def test_boxed_extraction(text, box):
    assert boxed_answer(text) == box


@pytest.mark.parametrize(
    "answer, mathd",
    [
        (r"\text{(B)}", "(B)"),  # a whole-answer \text{} is unwrapped
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\frac12", r"\frac{1}{2}"),
        (r"\frac1{72}", r"\frac{1}{72}"),
        (r"\sqrt3", r"\sqrt{3}"),
        ("3/4", r"\frac{3}{4}"),
        ("0.5", r"\frac{1}{2}"),
        (".5", r"\frac{1}{2}"),  # a leading dot gets its zero, then 0.5 is a half
        (r"x = \left( 1, 2 \right)", "(1,2)"),
        (r"5 \text{ cm}", "5"),
        (r"1 \text{ cm} + 2 \text{ cm}", r"1 \text{ cm} + 2 \text{ cm}"),  # two units: kept as is
        (r"30^\circ", "30"),
        (r"10\%", "10"),
        (r"\frac", r"\frac"),  # nothing after \frac: kept as is
    ],
)
def test_mathd_normalisation(answer, mathd):
    assert normalize_mathd(answer) == mathd


@pytest.mark.parametrize(
    "answer, norm",
    [
        ("2.0000001", "2"),  # within 1e-7 of an integer
        ("2.000001", "2.000001"),
        ("1,234,567", "1234567"),
        (r"\frac{x+1}{2}", "x+1/2"),  # their LaTeX-to-text: no parentheses
        (r"\sqrt[3]{2}", "sqrt(2)"),  # the index is dropped
        (r"7 \frac{3}{4}", "7+3/4"),  # a mixed number
        (r"\text{Yes}", "yes"),
        (r"3 \text{ million}", "3*10^6"),
        (r"5 \pi", "5pi"),
        (r"(-\infty, 2) \cup (3, \infty)", "(-inf,2)u(3,inf)"),
        (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "[1;2]"),
        (r"\cot x", "x"),  # \cot prints nothing
    ],
)
def test_sympy_side_normalisation(answer, norm):
    assert normalize_sympy(answer) == norm


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown answer kind 'code'"):
        grade_paper(r"\boxed{1}", "1", "code")


def test_verify_batch_grades_with_the_paper_grader_by_name():
    """`verify_batch(..., grader="paper")` runs the paper grader in the pool's workers."""
    from clipo_megatron.verify.graders import GRADERS
    from clipo_megatron.verify.pool import VerifierPool, verify_batch

    assert set(GRADERS) == {"math_verify", "paper"}
    rows = [f for f in FORMS if f[0] in ("mc_parens", "near_integer", "frac_unreduced")]
    responses, gts, kinds = zip(*[(f[1], f[2], f[3]) for f in rows])
    with VerifierPool(1) as pool:
        got = verify_batch(responses, gts, list(kinds), pool=pool, grader="paper")
    assert list(got) == [float(f[4]) for f in rows] == [0.0, 0.0, 1.0]  # table order
    assert got.statuses == ["ok"] * 3


def test_the_pool_records_what_the_paper_grader_reads():
    from clipo_megatron.verify.pool import VerifierPool

    responses = [r"<think>\boxed{A}</think> \boxed{B. Paris}", r"so \boxed 3"]
    with VerifierPool(1) as pool:
        v = pool.grade(responses, ["B", "3"], ["mc", "math"], grader="paper", extract=True)
    assert [x.answer for x in v] == ["B", None] and [x.score for x in v] == [1.0, 0.0]
