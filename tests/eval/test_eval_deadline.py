# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Eval reads each answer in the verifier's workers, under the same per-answer deadline as the
grade (issue 24, 3): a hostile response costs its own sample, not the evaluation."""

import json

import pytest

pytest.importorskip("math_verify")
pytestmark = pytest.mark.runner

from clipo_megatron.data.records import Record  # noqa: E402
from clipo_megatron.eval.engine import EvalSettings, evaluate  # noqa: E402
from clipo_megatron.verify.pool import VerifierPool  # noqa: E402
from tests.verify import slow_graders  # noqa: E402

RECS = {"gsm8k": [Record(f"q{i}?", str(i + 2), "math", "t", i, "gsm8k") for i in range(4)]}


class Gen:
    """Right answers, except question 1's: `deaf` (its worker ignores the alarm)."""

    def generate(self, prompts, n, *, sampling, max_tokens, seed):
        return [["deaf" if p == "q1?" else f"so \\boxed{{{int(p[1]) + 2}}}"] * n for p in prompts]


def test_extraction_runs_in_the_workers_under_the_deadline(tmp_path, monkeypatch):
    import clipo_megatron.verify.extract as extract

    def trap(*a, **k):
        raise AssertionError("answer extraction ran in the main process, with no deadline")

    monkeypatch.setattr(extract, "last_boxed", trap)  # the workers have their own, real one
    with VerifierPool(2, timeout=1.0, slack=1.0, grader=slow_graders.deaf) as pool:
        res = evaluate(Gen(), RECS, EvalSettings(n=2, chunk=4), tmp_path, pool=pool, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "samples" / "gsm8k.jsonl").read_text().splitlines()]
    by_q = {(r["index"], r["sample"]): r for r in rows}
    for i in range(4):
        for s in range(2):
            r = by_q[(i, s)]
            if i == 1:
                assert (r["verdict"], r["status"], r["extracted"]) == (0.0, "timeout", None)
            else:
                assert (r["verdict"], r["status"], r["extracted"]) == (1.0, "ok", str(i + 2))
    d = res["datasets"]["gsm8k"]
    assert d["statuses"] == {"ok": 6, "timeout": 2, "killed": 0, "error": 0, "too_long": 0}
    assert d["correct"] == 6 and d["timeouts"] == 2
