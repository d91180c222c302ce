# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper's grader: the authors' checking semantics, written here from their description.

The paper's runs (Qwen-Applications/CLIPO 13c5fd6, a verl fork) grade every answer with a
deepscaler-style checker. `grader: paper` reproduces what it decides; `grader: math_verify`
(verify/math.py, verify/choice.py) is the project's recommended, more lenient grader. The
differences, measured on answer forms, are the table in docs/reproduce.md.

Extraction: the text after the last `</think>` (reasoning models), then the *last* `\\boxed`
in it; it must read `\\boxed{...}` with balanced braces, else there is no answer (`\\boxed 3`,
an unclosed box, and `\\fbox{}`, which is located but never unwrapped). A gold answer holding
`\\boxed` (a MATH solution) is reduced the same way; a gold answer whose box fails gives 0.

Math: correct if the two answers are equal after Hendrycks' MATH normalisation
(`normalize_mathd`), or, failing that, after the sympy normalisation (`normalize_sympy`) and
then equal as strings or, element by element for tuples / intervals, under sympy:
`simplify(gt - pred) == 0`. Two guards come first: an unreduced fraction never equals its
reduced form (`\\frac{2}{4}` is not 1/2) and an integer gold answer needs an integer answer.
Numbers within 1e-7 of an integer count as it (`2.0000001` is 2).

Multiple choice: the boxed content up to its first `.`, stripped, must equal the gold letter
exactly (`B. Paris` is right; `(B)`, `\\text{B}`, `b`, `Option B` are wrong).

The two normalisations live in `verify/paper_normalize.py`; extraction, equality and the
rewards here.
"""

from __future__ import annotations

import re

from clipo_megatron.verify.paper_normalize import (
    drop_thousands_commas,
    is_int_text,
    normalize_mathd,
    normalize_sympy,
)

# ----------------------------------------------------------------------------- extraction


def answer_part(response: str) -> str:
    """What is graded: the text after the last `</think>` when the response has a reasoning
    block (an unclosed `<think>` leaves the whole response), stripped."""
    if "<think>" in response or "</think>" in response:
        return response.split("</think>")[-1].strip()
    return response.strip()


def boxed_answer(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (balanced braces), None when it is not of that form."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None  # a `\fbox` is found by the authors' scan but never unwrapped: no answer
    depth = 0
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                box = text[start : j + 1]
                return box[len("\\boxed{") : -1] if box.startswith("\\boxed{") else None
    return None


# ----------------------------------------------------------------------------- equality


def _letters(expr: str) -> int:
    return len({c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()})


def _sympy_safe(expr: str) -> bool:
    """Forms sympy may hang on, or text, are not evaluated (they are simply not equal)."""
    if _letters(expr) > 2 or "^{" in expr or "^(" in expr:
        return False
    return re.search(r"\^[0-9]+\^|\^[0-9][0-9]+", expr) is None


def _equal_under_sympy(gt: str, pred: str) -> bool:
    expr = f"({gt})-({pred})"
    if not _sympy_safe(expr):
        return False
    import sympy  # type: ignore[import-untyped]
    from sympy.parsing import sympy_parser  # type: ignore[import-untyped]

    try:
        tf = sympy_parser.standard_transformations + (
            sympy_parser.implicit_multiplication_application,
        )
        diff = sympy_parser.parse_expr(expr.replace("^", "**"), transformations=tf)
        return bool(sympy.simplify(diff) == 0)
    except Exception:  # anything sympy cannot read is not equal
        return False


def _elements(expr: str) -> list[str]:
    """A tuple / interval's elements (`(1,2]` -> ['1', '2']), else [expr]."""
    expr = drop_thousands_commas(expr)
    if not expr:
        return []
    brackets = "()[]"
    if (
        len(expr) > 2
        and expr[0] in brackets
        and expr[-1] in brackets
        and not any(c in expr[1:-1] for c in brackets)
    ):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")


def _equal_sympy_side(pred: str, gold: str) -> bool:
    g, p = normalize_sympy(gold), normalize_sympy(pred)
    if g == p:
        return True
    if not p:
        return False
    g_el, p_el = _elements(g), _elements(p)
    if len(g_el) > 1 and (g[0] != p[0] or g[-1] != p[-1]):  # interval ends must match
        return False
    if len(g_el) != len(p_el):
        return False
    for ge, pe in zip(g_el, p_el):
        if _FRACTION.search(ge) and _FRACTION.search(pe):
            ok = ge == pe  # an unreduced fraction is not its reduced form
        elif is_int_text(ge) != is_int_text(pe):
            ok = False  # an integer gold answer needs an integer answer
        else:
            ok = _equal_under_sympy(ge, pe)
        if not ok:
            return False
    return True


def math_equal(pred: str, gold: str) -> bool:
    """The authors' math equality of an extracted answer and one gold answer."""
    return normalize_mathd(pred) == normalize_mathd(gold) or _equal_sympy_side(pred, gold)


# ----------------------------------------------------------------------------- rewards


def _gold_answers(ground_truth: object) -> list[str]:
    golds = ground_truth if isinstance(ground_truth, list) else [ground_truth]
    out = []
    for g in map(str, golds):
        if "\\boxed" in g:
            box = boxed_answer(g)
            if box is not None:
                out.append(box)
        else:
            out.append(g)
    return out


def paper_math_reward(response: str, ground_truth: object) -> float:
    """1.0 if the response's boxed answer equals a gold answer under the paper's rules."""
    pred = boxed_answer(answer_part(response))
    if pred is None:
        return 0.0
    return float(any(math_equal(pred, g) for g in _gold_answers(ground_truth)))


def paper_choice_reward(response: str, ground_truth: str) -> float:
    """1.0 if the boxed content up to its first `.` is exactly the gold letter."""
    pred = boxed_answer(answer_part(response))
    if pred is None:
        return 0.0
    return float(pred.split(".")[0].strip() == str(ground_truth))


def grade_paper(response: str, ground_truth: str, kind: str) -> float:
    """The paper grader's verdict for one response: kind "math" or "mc"."""
    if kind == "mc":
        return paper_choice_reward(response, ground_truth)
    if kind == "math":
        return paper_math_reward(response, ground_truth)
    raise ValueError(f"unknown answer kind {kind!r}; expected 'math' or 'mc'")


def graded_answer(response: str, kind: str) -> str | None:
    """What the paper grader reads (recorded with eval samples): the boxed answer after the
    last `</think>`, for multiple choice cut at its first `.`; None when there is no answer."""
    pred = boxed_answer(answer_part(response))
    if pred is None or kind != "mc":
        return pred
    return pred.split(".")[0].strip()
