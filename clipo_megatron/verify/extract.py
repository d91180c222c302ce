# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Answer extraction from model responses (paper App. "Verifiable Reward Models").

The paper grades the content of the *last* `\\boxed{}` of a response. Braces
are balanced so nested ones survive (`\\boxed{\\frac{1}{2}}`); an unclosed
box, or none, means no answer; `\\boxed 9` (one token, no braces: valid TeX,
seen in MATH solutions) counts. `\\fbox{}` counts as a box, as in the
authors' verl scorer. `normalize_text` strips the LaTeX wrappers that carry
no value (`\\text{}`, `$`, a trailing period) for plain string comparison.
"""

from __future__ import annotations

import re

_OPENER = re.compile(r"\\(?:boxed|fbox)\{")
_BRACE = re.compile(r"[{}]")
_BARE_BOX = re.compile(r"\\boxed +([^\s${}]+)")  # `\boxed 9` (TeX allows one token without braces)
_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")


def _box_spans(text: str) -> list[tuple[int, int, int]]:
    """(opener start, content start, content end) of every closed brace box, in one pass.

    One left-to-right walk over the braces with a stack of open ones: each brace is visited
    once, so the cost is linear in the text whatever its nesting (a scan to the end per
    opener is quadratic: 140k characters of `\\boxed{` took 102 s)."""
    starts = {m.end() - 1: m.start() for m in _OPENER.finditer(text)}  # `{` index -> opener
    spans: list[tuple[int, int, int]] = []
    stack: list[int] = []
    for m in _BRACE.finditer(text):
        j = m.start()
        if text[j] == "{":
            stack.append(j)
        elif stack:
            i = stack.pop()
            if i in starts:
                spans.append((starts[i], i + 1, j))
    return spans


def _bare_spans(text: str) -> list[tuple[int, int, int]]:
    return [(m.start(), m.start(1), m.end(1)) for m in _BARE_BOX.finditer(text)]


def all_boxed(text: str) -> list[str]:
    """Contents of every closed `\\boxed{...}` / `\\fbox{...}` / `\\boxed x`, in order of appearance.

    Nested boxes repeat their inner text, so the output can be quadratic in the input; the
    grader reads `last_boxed`, which is linear."""
    spans = sorted(_box_spans(text) + _bare_spans(text))
    return [_content(text, s) for s in spans]


def _content(text: str, span: tuple[int, int, int]) -> str:
    _, a, b = span
    c = text[a:b]
    return c if text[a - 1] == "{" else c.rstrip(".,")


def last_boxed(text: str) -> str | None:
    """Content of the last closed box (the graded answer); None when there is none. Linear."""
    spans = _box_spans(text) + _bare_spans(text)
    return _content(text, max(spans)) if spans else None


def normalize_text(answer: str) -> str:
    """`\\text{ Yes. }` -> `yes`: unwrap text macros, drop `$`, spaces at the ends, a final period, case."""
    prev = None
    while prev != answer:  # unwrap nested wrappers from the inside out
        prev, answer = answer, _WRAPPERS.sub(r"\1", answer)
    answer = answer.replace("$", "").strip().rstrip(".").strip()
    return answer.lower()


def clean_answer(answer: object) -> str:
    """The gold-answer rule, its one home: GSM8K '... #### 1,234' -> '1234'; a solution with
    \\boxed{} -> its last box; else the stripped text."""
    a = str(answer)
    if "####" in a:
        return a.split("####")[-1].strip().replace(",", "")
    if "\\boxed" in a or "\\fbox" in a:
        boxed = last_boxed(a)
        if boxed is not None:
            return boxed.strip()
    return a.strip()
