# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper grader's two answer normalisations, before any comparison (`verify/paper.py`).

Apart from the grader because they are the bulk of its rules and are tested form by form
(tests/verify/test_paper_grader.py): `normalize_mathd` is Hendrycks' MATH normalisation,
`normalize_sympy` the text the sympy comparison reads. Its LaTeX-to-text step is pylatexenc's
`latex2text`, the library the authors' checker calls, at the same point of the same steps: a
hand-written converter differs from it on every macro it did not anticipate (matrices, `\\mathit`,
`\\nicefrac`, `\\colorbox`, ...; tests/verify/test_paper_latex_forms.py).
"""

from __future__ import annotations

import re

from pylatexenc.latex2text import LatexNodes2Text

# ----------------------------------------------------------------------------- MATH (Hendrycks)

_TEXT_WRAPPED = re.compile(r"^\\text\{(?P<text>.+?)\}$")


class _Unnormalisable(Exception):
    """A step of the MATH normalisation met a form it cannot handle: keep the input."""


def normalize_mathd(answer: str) -> str:
    """Hendrycks' MATH answer normalisation (units, `\\frac` / `\\sqrt` forms, spaces, `a/b`)."""
    answer = answer.strip()
    m = _TEXT_WRAPPED.search(answer)
    if m is not None:
        answer = m.group("text").strip()
    try:
        return _strip_mathd(answer)
    except _Unnormalisable:
        return answer


def _strip_mathd(s: str) -> str:
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:  # a unit on the right, `5 \text{ cm}`; two of them cannot be read
        parts = s.split("\\text{ ")
        if len(parts) != 2:
            raise _Unnormalisable
        s = parts[0]
    s = s.replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # `x = 5` -> `5`
        s = sides[1]
    s = _braced_sqrt(s).replace(" ", "")
    s = _braced_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_to_frac(s)


def _braced_sqrt(s: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}` (one character)."""
    head, *rest = s.split("\\sqrt")
    out = head
    for part in rest:
        if not part:
            raise _Unnormalisable
        out += "\\sqrt" + (part if part[0] == "{" else "{" + part[0] + "}" + part[1:])
    return out


def _braced_fracs(s: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}`; a `\\frac` with fewer than
    two characters after it leaves the string as it was."""
    head, *rest = s.split("\\frac")
    out = head
    for part in rest:
        out += "\\frac"
        if not part:
            raise _Unnormalisable
        if part[0] == "{":
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, tail = part[0], part[1], part[2:]
        out += "{" + a + "}" + (b if b == "{" else "{" + b + "}") + tail
    return out


def _slash_to_frac(s: str) -> str:
    """`3/4` -> `\\frac{3}{4}` for plain integers only."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


# ----------------------------------------------------------------------------- sympy side

_UNITS = (
    "degree cm centimeter meter mile second minute hour day week month year foot feet inch yard"
).split()
_UNICODE = {"√": "sqrt", "π": "pi", "∞": "inf", "∪": "U", "·": "*", "×": "*"}
_THOUSANDS = re.compile(r"(\d)(,)(\d\d\d)($|\D)")


def _float_or_none(s: str) -> float | None:
    try:
        return float(s)
    except (ValueError, OverflowError):
        return None


def _near_int(x: float) -> bool:
    try:
        return abs(x - int(round(x))) <= 1e-7
    except (ValueError, OverflowError):  # nan, inf
        return False


def drop_thousands_commas(s: str) -> str:
    """`1,234,567` -> `1234567`; tuple commas (`(1,2)`) stay."""
    while True:
        nxt = _THOUSANDS.sub(r"\1\3\4", s)
        if nxt == s:
            return s
        s = nxt


def is_int_text(s: str) -> bool:
    x = _float_or_none(drop_thousands_commas(s))
    return x is not None and _near_int(x)


def normalize_sympy(expr: str) -> str:
    """The sympy-side normalisation: text wrappers, `$` / `%`, units, near-integers, LaTeX to
    text, mixed numbers, spaces, braces, case."""
    m = _TEXT_WRAPPED.search(expr)
    if m is not None:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    for word, power in (("million", 6), ("billion", 9), ("trillion", 12)):
        expr = expr.replace(word, f"*10^{power}")
    for unit in _UNITS:
        expr = re.sub(unit + r"(es)?(s)? *(\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr[:1] == "{" and expr[-1:] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    x = _float_or_none(expr)
    if x is not None and _near_int(x):
        expr = str(int(round(x)))
    if "\\" in expr:
        try:
            expr = _latex_for_sympy(expr)
        except Exception:  # the authors' checker keeps the text when the converter fails
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", r"\1+\2", expr)  # a mixed number: `7 3/4` -> 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if is_int_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _latex_for_sympy(expr: str) -> str:
    """LaTeX -> the text sympy reads: pylatexenc's converter (one per call, as theirs), then
    its Unicode symbols spelled for sympy."""
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac")
    expr = LatexNodes2Text().latex_to_text(expr.replace("\\frac", " \\frac"))  # mixed numbers
    for char, text in _UNICODE.items():
        expr = expr.replace(char, text)
    return expr.strip()
