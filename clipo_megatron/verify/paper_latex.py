# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""LaTeX -> plain text, as the paper grader's sympy step needs it (`verify/paper_normalize.py`).

The authors' checker turns a LaTeX answer into text with a generic LaTeX-to-text converter
before sympy reads it. What that step does to answer-shaped LaTeX decides verdicts, so this
module reproduces its observable behaviour (measured on answer forms, docs/reproduce.md), not
a faithful typesetter:

- braces are transparent (`{1}` -> `1`); a macro it does not know prints nothing, its braced
  arguments stay (`\\binom{5}{2}` -> `52`, `\\dfrac{1}{2}` -> `12`: the caller rewrites
  `\\dfrac` first);
- `\\frac{a}{b}` -> `a/b` with no parentheses (so `\\frac{x+1}{2}` reads as x + 1/2);
  `\\sqrt[n]{x}` -> `√(x)` (the index is dropped);
- symbols become their Unicode character (`\\pi` -> π, `\\le` -> ≤), a few print nothing
  (`\\ne`, `\\gcd`, `\\lt`), spacing macros a space, `\\!` nothing;
- a few macros swallow their argument (`\\mbox`, `\\textsf`, `\\texttt`, `\\label`,
  `\\hspace`); `\\color{c}` drops its colour;
- matrices print `[ a b; c d ]`; other environments their body.
"""

from __future__ import annotations

import re

_GREEK = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma tau "
    "upsilon chi psi omega"
).split()
_GREEK_CHARS = "αβγδϵζηθικλμνξπρστυχψω"
_UPPER_GREEK = {
    "Gamma": "Γ",
    "Delta": "Δ",
    "Theta": "Θ",
    "Lambda": "Λ",
    "Xi": "Ξ",
    "Pi": "Π",
    "Sigma": "Σ",
    "Upsilon": "Υ",
    "Phi": "Φ",
    "Psi": "Ψ",
    "Omega": "Ω",
}
SYMBOLS: dict[str, str] = {
    **dict(zip(_GREEK, _GREEK_CHARS)),
    **_UPPER_GREEK,
    "varepsilon": "ε",
    "phi": "ϕ",
    "varphi": "φ",
    "vartheta": "ϑ",
    "infty": "∞",
    "cup": "∪",
    "cap": "∩",
    "cdot": "·",
    "times": "×",
    "div": "÷",
    "pm": "±",
    "mp": "∓",
    "le": "≤",
    "leq": "≤",
    "ge": "≥",
    "geq": "≥",
    "leqslant": "⩽",
    "geqslant": "⩾",
    "neq": "≠",
    "approx": "≈",
    "equiv": "≡",
    "cong": "≅",
    "sim": "∼",
    "perp": "⊥",
    "parallel": "∥",
    "in": "∈",
    "notin": "∉",
    "subset": "⊂",
    "subseteq": "⊆",
    "setminus": "∖",
    "emptyset": "∅",
    "varnothing": "∅",
    "circ": "∘",
    "angle": "∠",
    "to": "→",
    "rightarrow": "→",
    "leftarrow": "←",
    "Rightarrow": "⇒",
    "mapsto": "↦",
    "dots": "…",
    "ldots": "…",
    "cdots": "⋯",
    "vdots": "⋮",
    "ddots": "⋱",
    "prime": "'",
    "mid": "|",
    "vert": "|",
    "lvert": "|",
    "rvert": "|",
    "langle": "⟨",
    "rangle": "⟩",
    "lfloor": "⌊",
    "rfloor": "⌋",
    "lceil": "⌈",
    "rceil": "⌉",
    "ell": "ℓ",
    "partial": "∂",
    "nabla": "∇",
    "forall": "∀",
    "exists": "∃",
    "sum": "∑",
    "prod": "∏",
    "int": "∫",
    "ast": "∗",
    "star": "⋆",
    "bullet": "∙",
    "aleph": "ℵ",
    "square": "□",
    "textdegree": "°",
    "backslash": "\\",
    "quad": "  ",
    "qquad": "    ",
    # operator names print as their name
    **{f: f for f in "lim max min cos sin tan exp log ln arcsin arccos arctan".split()},
}
# Macros that print nothing and swallow their first braced argument.
_SWALLOW = {"mbox", "textsf", "texttt", "label", "hspace", "vspace"}
# Macros whose first braced argument is a setting, not content.
_SETTING = {"color", "textcolor"}
# Non-letter control symbols: `\{` -> {, `\,` -> space, ...
_CONTROL = {
    "{": "{",
    "}": "}",
    "%": "%",
    "$": "$",
    "&": "&",
    "#": "#",
    "_": "_",
    ",": " ",
    ";": " ",
    ":": " ",
    " ": " ",
    "\\": "\n",
}
_MATRICES = {"pmatrix", "bmatrix", "vmatrix", "Bmatrix", "matrix", "array", "smallmatrix"}
_NAME = re.compile(r"[A-Za-z]+")


class _Reader:
    """A cursor over the LaTeX string: groups, macro arguments, environments."""

    def __init__(self, s: str):
        self.s = s
        self.i = 0

    def group(self, i: int) -> tuple[str, int]:
        """The raw content of the brace group opening at s[i] and the index after it (an
        unclosed group runs to the end)."""
        depth, j = 0, i
        while j < len(self.s):
            c = self.s[j]
            if c == "\\":
                j += 2
                continue
            depth += (c == "{") - (c == "}")
            if depth == 0:
                return self.s[i + 1 : j], j + 1
            j += 1
        return self.s[i + 1 :], len(self.s)

    def argument(self) -> str | None:
        """The next macro argument (a braced group or one character), None at the end."""
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1
        if self.i >= len(self.s):
            return None
        if self.s[self.i] == "{":
            raw, self.i = self.group(self.i)
            return raw
        if self.s[self.i] == "\\":
            m = _NAME.match(self.s, self.i + 1)
            end = m.end() if m else self.i + 2
            raw, self.i = self.s[self.i : end], end
            return raw
        self.i += 1
        return self.s[self.i - 1]

    def optional(self) -> None:
        """Skip an optional `[...]` argument (`\\sqrt[3]`)."""
        if self.i < len(self.s) and self.s[self.i] == "[":
            end = self.s.find("]", self.i)
            self.i = len(self.s) if end < 0 else end + 1


def latex_to_text(s: str) -> str:
    """Plain text of a LaTeX answer, as the authors' checker's converter prints it."""
    r = _Reader(s)
    out: list[str] = []
    while r.i < len(s):
        c = s[r.i]
        if c == "{":
            raw, r.i = r.group(r.i)
            out.append(latex_to_text(raw))
        elif c == "}":
            r.i += 1
        elif c == "~":
            out.append("\xa0")
            r.i += 1
        elif s.startswith("---", r.i) or s.startswith("--", r.i):
            dash = "---" if s.startswith("---", r.i) else "--"
            out.append("—" if dash == "---" else "–")
            r.i += len(dash)
        elif c == "\\":
            out.append(_macro(r))
        else:
            out.append(c)
            r.i += 1
    return "".join(out)


def _macro(r: _Reader) -> str:
    s = r.s
    m = _NAME.match(s, r.i + 1)
    if m is None:  # a control symbol: `\{`, `\,`, `\!`, `\\`
        sym = s[r.i + 1 : r.i + 2]
        r.i += 2
        return _CONTROL.get(sym, "")
    name = m.group(0)
    r.i = m.end()
    while r.i < len(s) and s[r.i] == " ":  # TeX eats the blanks after a control word
        r.i += 1
    if name == "frac":
        a, b = r.argument(), r.argument()
        return f"{latex_to_text(a or '')}/{latex_to_text(b or '')}"
    if name == "sqrt":
        r.optional()
        return f"√({latex_to_text(r.argument() or '')})"
    if name == "begin":
        return _environment(r, r.argument() or "")
    if name == "end":
        r.argument()
        return ""
    if name in _SWALLOW:
        r.argument()
        return ""
    if name in _SETTING:
        r.argument()
        return ""
    return SYMBOLS.get(name, "")


def _environment(r: _Reader, env: str) -> str:
    """`\\begin{env} ... \\end{env}`: matrices as `[ a b; c d ]`, other environments their body."""
    end = r.s.find(f"\\end{{{env}}}", r.i)
    body = r.s[r.i : len(r.s) if end < 0 else end]
    r.i = len(r.s) if end < 0 else end + len(f"\\end{{{env}}}")
    if env == "array" and body.lstrip().startswith("{"):  # the column spec `{cc}`
        body = body[body.find("}") + 1 :]
    if env not in _MATRICES:
        return latex_to_text(body)
    rows = [" ".join(latex_to_text(c) for c in row.split("&")) for row in body.split("\\\\")]
    return "[ " + "; ".join(rows) + " ]"
