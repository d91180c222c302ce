# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`grader: paper` on LaTeX answer forms: every verdict equals the authors' checker's.

Their checker turns LaTeX into text with pylatexenc's `latex2text` before sympy reads it; the
paper grader calls the same library at the same step (`verify/paper_normalize.py`). A
hand-written converter differs on the macros it did not anticipate: the one this replaced gave
21 of these 71 verdicts wrong (matrices, `\\textdollar`, `\\sinh`, `\\mathit`, `\\nicefrac`,
`\\not=`, `\\colorbox`, `\\hat`, `\\mathbb`, `\\mathcal`, arrows, `\\sup`, phantoms).

The `authors` column is the authors' checker run outside this project, as docs/reproduce.md
("The grader", "Regenerating the authors' verdicts") describes: Qwen-Applications/CLIPO 13c5fd6,
`verl/utils/reward_score/conrl_reward.py` loaded by path in a venv with sympy 1.14.0 and
pylatexenc 2.10, called as `compute_score("conrl/math", response, gold)`; pylatexenc 2.11 gives
the same 71 verdicts.
"""

from __future__ import annotations

import pytest

from clipo_megatron.verify.paper import grade_paper
from clipo_megatron.verify.paper_normalize import normalize_sympy

# id, response, gold, the authors' verdict
FORMS = [
    (
        "matrix_vs_pmatrix",
        r"\boxed{\begin{matrix} 1 \\ 2 \end{matrix}}",
        r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}",
        0,
    ),
    (
        "bmatrix_vs_pmatrix",
        r"\boxed{\begin{bmatrix} 1 \\ 2 \end{bmatrix}}",
        r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}",
        1,
    ),
    (
        "vmatrix_vs_pmatrix",
        r"\boxed{\begin{vmatrix} 1 \\ 2 \end{vmatrix}}",
        r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}",
        0,
    ),
    (
        "pmatrix_same",
        r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}}",
        r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}",
        1,
    ),
    (
        "pmatrix_2x2",
        r"\boxed{\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}}",
        r"\begin{pmatrix}1&2\\3&4\end{pmatrix}",
        1,
    ),
    (
        "bmatrix_2x2",
        r"\boxed{\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}}",
        r"\begin{pmatrix}1&2\\3&4\end{pmatrix}",
        1,
    ),
    ("textdollar", r"\boxed{\textdollar\, 18}", "18", 0),
    ("textdollar_nospace", r"\boxed{\textdollar18}", "18", 0),
    ("sinh_zero", r"\boxed{\sinh 0}", "0", 0),
    ("cosh_x", r"\boxed{\cosh x}", r"\cosh x", 1),
    ("mathit_name", r"\boxed{\mathit{Evelyn}}", r"\text{Evelyn}", 0),
    ("textup_name", r"\boxed{\textup{Evelyn}}", r"\text{Evelyn}", 0),
    ("textrm_name", r"\boxed{\textrm{Evelyn}}", r"\text{Evelyn}", 1),
    ("mathrm_name", r"\boxed{\mathrm{Evelyn}}", r"\text{Evelyn}", 1),
    ("textbf_name", r"\boxed{\textbf{Evelyn}}", r"\text{Evelyn}", 1),
    ("emph_name", r"\boxed{\emph{Evelyn}}", r"\text{Evelyn}", 1),
    ("nicefrac_sqrt", r"\boxed{\nicefrac{\sqrt3}{2}}", r"\frac{\sqrt{3}}{2}", 1),
    ("nicefrac_int", r"\boxed{\nicefrac{1}{2}}", r"\frac{1}{2}", 1),
    ("not_eq", r"\boxed{x \not= 3}", r"x \neq 3", 1),
    ("ne_vs_neq", r"\boxed{x \ne 3}", r"x \neq 3", 0),
    ("colorbox", r"\boxed{\colorbox{yellow}{5}}", "5", 1),
    ("fcolorbox", r"\boxed{\fcolorbox{red}{yellow}{5}}", "5", 1),
    ("textcolor", r"\boxed{\textcolor{red}{5}}", "5", 1),
    ("hat_i", r"\boxed{\hat{i}+\hat{j}}", r"\hat{i} + \hat{j}", 1),
    ("hat_vs_plain", r"\boxed{\hat{i}}", "i", 0),
    ("vec_v", r"\boxed{\vec{v}}", "v", 0),
    ("mathbb_R", r"\boxed{\mathbb{R}}", r"\mathbb{R}", 1),
    ("mathbb_vs_R", r"\boxed{\mathbb{R}}", "R", 0),
    ("mathcal_A", r"\boxed{\mathcal{A}}", "A", 0),
    ("mathbf_v", r"\boxed{\mathbf{v}}", "v", 0),
    ("rightarrow", r"\boxed{x \rightarrow 2}", r"x \to 2", 1),
    ("longrightarrow", r"\boxed{x \longrightarrow 2}", r"x \to 2", 0),
    ("Rightarrow", r"\boxed{x \Rightarrow 2}", r"x \implies 2", 0),
    ("leftrightarrow", r"\boxed{x \leftrightarrow 2}", r"x \iff 2", 0),
    ("sup", r"\boxed{\sup S}", "S", 0),
    ("inf_op", r"\boxed{\inf S}", "S", 0),
    ("phantom", r"\boxed{\phantom{0}5}", "5", 1),
    ("hphantom", r"\boxed{\hphantom{00}5}", "5", 1),
    ("vphantom", r"\boxed{5\vphantom{x}}", "5", 1),
    ("dfrac_x", r"\boxed{\dfrac{x+1}{2}}", r"\frac{x+1}{2}", 1),
    ("binom", r"\boxed{\binom{5}{2}}", "10", 0),
    ("binom_52", r"\boxed{\binom{5}{2}}", "52", 1),
    ("sqrt_index", r"\boxed{\sqrt[3]{2}}", "2^{1/3}", 0),
    ("cot", r"\boxed{\cot x}", r"\cot x", 1),
    ("degree_textdegree", r"\boxed{30\textdegree}", "30", 1),
    ("operatorname", r"\boxed{\operatorname{lcm}(4,6)}", "12", 0),
    ("mbox_unit", r"\boxed{5\mbox{ cm}}", "5", 1),
    ("hspace", r"\boxed{5\hspace{1cm}}", "5", 1),
    ("tfrac_pi", r"\boxed{\tfrac{\pi}{2}}", r"\frac{\pi}{2}", 1),
    ("cdot", r"\boxed{2 \cdot 3}", "6", 0),
    ("times", r"\boxed{2 \times 3}", "6", 0),
    ("infty_interval", r"\boxed{(-\infty, 2]}", r"(-\infty,2]", 1),
    ("cup_interval", r"\boxed{(-\infty,1)\cup(2,\infty)}", r"(-\infty, 1) \cup (2, \infty)", 1),
    ("pi_plain", r"\boxed{2\pi}", r"2 \pi", 1),
    ("circ_deg", r"\boxed{45^{\circ}}", "45", 1),
    ("dots", r"\boxed{1, 2, \dots, 5}", r"1,2,\ldots,5", 1),
    ("text_in_math", r"\boxed{5\text{ apples}}", "5", 1),
    ("ldots_vs_dots", r"\boxed{\ldots}", r"\dots", 1),
    ("unknown_macro", r"\boxed{\foo{5}}", "5", 1),
    ("left_right_abs", r"\boxed{\left|x\right|}", "|x|", 1),
    ("lvert", r"\boxed{\lvert x \rvert}", "|x|", 1),
    ("sqrt_2_over", r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", 1),
    ("dfrac_mixed", r"\boxed{2\dfrac{1}{2}}", "5/2", 1),
    (
        "array_env",
        r"\boxed{\begin{array}{cc} 1 & 2 \end{array}}",
        r"\begin{pmatrix} 1 & 2 \end{pmatrix}",
        1,
    ),
    ("cases_env", r"\boxed{\begin{cases} 1 \end{cases}}", "1", 1),
    ("align_env", r"\boxed{\begin{aligned} x &= 1 \end{aligned}}", "1", 0),
    ("unclosed_env", r"\boxed{\begin{pmatrix} 1 \\ 2}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", 1),
    ("tilde_space", r"\boxed{5~\text{cm}}", "5", 1),
    ("em_dash", r"\boxed{1--2}", "1-2", 0),
    ("percent_sign", r"\boxed{50\%}", r"50\%", 1),
    ("ampersand", r"\boxed{1 \& 2}", "1,2", 0),
]
IDS = [f[0] for f in FORMS]


def test_the_table_holds_the_issues_forms():
    issue = {"matrix_vs_pmatrix", "bmatrix_vs_pmatrix", "vmatrix_vs_pmatrix", "textdollar"}
    issue |= {"sinh_zero", "mathit_name", "textup_name", "nicefrac_sqrt", "not_eq", "colorbox"}
    issue |= {"hat_i", "mathbb_R", "mathcal_A", "longrightarrow", "sup", "phantom"}
    assert issue <= set(IDS) and len(IDS) == len(set(IDS))
    assert {f[3] for f in FORMS} == {0, 1}


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_paper_grader_gives_the_authors_verdict(form):
    _, response, gold, authors = form
    assert grade_paper(response, gold, "math") == float(authors)


@pytest.mark.parametrize(
    "answer, text",
    [  # the authors' `_normalize` strings (same run as the table)
        (r"\mathit{Evelyn}", "𝐸𝑣𝑒𝑙𝑦𝑛"),  # math italic letters: not `evelyn`
        (r"\begin{vmatrix} 1 \\ 2 \end{vmatrix}", "1\n2"),  # no brackets, unlike pmatrix
        (r"\begin{bmatrix} 1 \\ 2 \end{bmatrix}", "[1;2]"),
        (r"\textdollar\, 18", "$18"),  # the `$` is printed after the `$` step ran
        (r"\nicefrac{\sqrt3}{2}", "sqrt(3)/2"),
        (r"x \not= 3", "x≠3"),
    ],
)
def test_the_sympy_side_reads_pylatexenc_text(answer, text):
    assert normalize_sympy(answer) == text
