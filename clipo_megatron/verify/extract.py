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

_BOX_OPENERS = ("\\boxed{", "\\fbox{")
_BARE_BOX = re.compile(r"\\boxed +([^\s${}]+)")  # `\boxed 9` (TeX allows one token without braces)
_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")


def _balanced(text: str, start: int) -> str | None:
    """Content of the brace group whose `{` is at text[start - 1]; None when unclosed."""
    depth = 1
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[start:j]
    return None


def all_boxed(text: str) -> list[str]:
    """Contents of every closed `\\boxed{...}` / `\\fbox{...}` / `\\boxed x`, in order of appearance."""
    out: list[tuple[int, str]] = []
    for opener in _BOX_OPENERS:
        i = text.find(opener)
        while i >= 0:
            content = _balanced(text, i + len(opener))
            if content is not None:
                out.append((i, content))
            i = text.find(opener, i + 1)
    out += [(m.start(), m.group(1).rstrip(".,")) for m in _BARE_BOX.finditer(text)]
    return [c for _, c in sorted(out)]


def last_boxed(text: str) -> str | None:
    """Content of the last closed box (the graded answer); None when there is none."""
    boxes = all_boxed(text)
    return boxes[-1] if boxes else None


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
