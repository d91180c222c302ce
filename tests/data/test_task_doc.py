# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""docs/cpu_demo.md describes the task the code draws: the range of its two terms.

The docs said "two single-digit terms"; reasoning-gym's one-digit setting draws 0..10 inclusive.
The range stated in the doc is compared with the terms of 3000 drawn problems.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_docs_state_the_drawn_term_range():
    pytest.importorskip("reasoning_gym")
    from clipo_megatron.data.arithmetic import arithmetic_problems

    doc = (ROOT / "docs" / "cpu_demo.md").read_text()
    assert "two single-digit terms" not in doc
    stated = re.search(r"basic_arithmetic` \(two terms in (\d+)\.\.(\d+), \+ and -", doc)
    assert stated, "docs/cpu_demo.md: the task row must state `two terms in LO..HI, + and -`"
    terms: set[int] = set()
    ops: set[str] = set()
    questions = set()
    for r in arithmetic_problems(3000, 0):
        q = r.prompt.split("\n")[0]
        m = re.fullmatch(r"Calculate (\d+) ([+-]) (\d+)\.", q)
        assert m, q
        terms |= {int(m[1]), int(m[3])}
        ops.add(m[2])
        questions.add(q)
    assert (min(terms), max(terms)) == (int(stated[1]), int(stated[2])) == (0, 10)
    assert ops == {"+", "-"}
    n = int(re.search(r"(\d+) distinct questions", doc)[1])
    assert len(questions) == n == 11 * 11 * 2
