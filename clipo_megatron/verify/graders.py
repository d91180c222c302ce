# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What a grade is (`Verdict`, its `STATUSES`) and which function makes it (`GRADERS`).

Kept apart from the pool so that the worker processes, the pool and the drivers that only
read statuses or name a grader share one definition without importing the multiprocessing
machinery. A grader runs in this process here; `verify/pool.py` runs it under a deadline.
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from clipo_megatron.grader_names import GRADERS  # by name: grader_names.py

KINDS = ("math", "mc")
STATUSES = ("ok", "timeout", "killed", "error", "too_long")


Grader = Callable[[str, str, str], float]


@dataclass(frozen=True)
class Verdict:
    score: float  # 1.0 correct, 0.0 otherwise
    status: str  # one of STATUSES
    detail: str = ""  # why, for a status other than "ok"
    answer: str | None = None  # what was graded (`graded_answer`), when the batch asked for it


class Scores(list):
    """The scores of a batch (a plain list of floats) that also carries each answer's status."""

    def __init__(self, verdicts: Iterable[Verdict]):
        verdicts = list(verdicts)
        super().__init__(v.score for v in verdicts)
        self.statuses = [v.status for v in verdicts]


def status_counts(statuses: Iterable[str]) -> dict[str, int]:
    """Answers per status, every status present (a zero is a reading, not a missing key)."""
    c = Counter(statuses)
    unknown = set(c) - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown verifier status(es) {sorted(unknown)}; expected {STATUSES}")
    return {s: c[s] for s in STATUSES}


def quiet_math_verify() -> None:
    """math-verify logs a warning on every call made with its timeouts off; ours replaces them."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)


def grade_one(response: str, ground_truth: str, kind: str) -> float:
    """The verdict of one response, in this process, without any timeout."""
    quiet_math_verify()
    if kind == "mc":
        from clipo_megatron.verify.choice import verify_choice

        return verify_choice(response, ground_truth)
    if kind == "math":
        from clipo_megatron.verify.math import verify_math

        return verify_math(response, ground_truth, timeout_seconds=None)
    raise ValueError(f"unknown answer kind {kind!r}; expected one of {KINDS}")


def resolve_grader(grader: str | Grader) -> Grader:
    """A grader function from itself, a name in GRADERS, or "module:function"."""
    if callable(grader):
        return grader
    spec = GRADERS.get(grader, grader)
    if ":" not in spec:
        raise ValueError(f"unknown grader {grader!r}; expected one of {sorted(GRADERS)}")
    module, name = spec.split(":", 1)
    return getattr(importlib.import_module(module), name)


def check_texts(responses: Sequence[object], ground_truths: Sequence[object]) -> None:
    """ValueError naming the first row whose response or ground truth is not a string: `None`
    would be graded as the text "None" (0.0, status ok) and an int would be a bare TypeError."""
    for what, seq, fix in (
        ("responses", responses, "pass '' for an empty response"),
        ("ground_truths", ground_truths, "each answer needs its ground truth as a string"),
    ):
        for i, x in enumerate(seq):
            if not isinstance(x, str):
                raise ValueError(
                    f"{what}[{i}] is {type(x).__name__} {x!r:.40}, not a string: {fix}"
                )


def check_grader_importable(grader: Grader) -> None:
    """ValueError for a grader function defined in the caller's `__main__`: the workers never
    import the caller's main (`pool_worker.callers_main_hidden`), so they could not find it."""
    if getattr(grader, "__module__", None) == "__main__":
        name = getattr(grader, "__qualname__", repr(grader))
        raise ValueError(
            f"grader {name} is defined in __main__, which the verifier's workers do not import: "
            "move it into a module (or name one in GRADERS)"
        )
