# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The eval pins every sampling knob, records it with the scores, and grades with `grader`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from clipo_megatron.data.records import Record
from clipo_megatron.eval.engine import EvalSettings, evaluate
from clipo_megatron.eval.suites import SUITES, TRACK1, TRACK1_GREEDY, suite_for
from clipo_megatron.generation.sampling import Sampling
from clipo_megatron.verify.pool import VerifierPool

MC = [Record(f"mc{i}", "B", "mc", "t", i, "mmlu") for i in range(2)]
MATH = [Record(f"m{i}", "2", "math", "t", i, "gsm8k") for i in range(2)]
# answers the two graders disagree on (docs/reproduce.md's table): (B) and 2.0000001
ANSWERS = {
    "mc0": r"\boxed{(B)}",
    "mc1": r"\boxed{B}",
    "m0": r"\boxed{2.0000001}",
    "m1": r"\boxed{2}",
}


class RecordingGen:
    def __init__(self):
        self.kwargs: list[dict] = []

    def generate(self, prompts, n, **kw):
        self.kwargs.append(kw)
        return [[ANSWERS[p]] * n for p in prompts]


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(1) as p:
        yield p


def test_every_knob_reaches_the_generator_and_the_results(tmp_path, pool):
    gen = RecordingGen()
    s = EvalSettings(n=1, temperature=0.0, top_p=1.0, max_tokens=8, chunk=4)
    res = evaluate(gen, {"mmlu": MC}, s, tmp_path, pool=pool, progress=False)
    assert gen.kwargs[0] == dict(
        sampling=Sampling(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0),
        max_tokens=8,
        seed=gen.kwargs[0]["seed"],
    )
    recorded = res["settings"]
    assert (recorded["top_k"], recorded["min_p"], recorded["repetition_penalty"]) == (0, 0.0, 1.0)
    assert recorded["grader"] is None and recorded["temperature"] == 0.0  # None: the pool's
    assert json.dumps(recorded)  # what results.json stores


@pytest.mark.runner
@pytest.mark.parametrize(
    "grader, mc, math",
    [("math_verify", 100.0, 50.0), ("paper", 50.0, 100.0)],  # (B): mv only; 2.0000001: paper only
)
def test_the_grader_sets_the_scores(tmp_path, pool, grader, mc, math):
    pytest.importorskip("math_verify")
    s = EvalSettings(n=2, max_tokens=8, chunk=4, grader=grader)
    res = evaluate(
        RecordingGen(), {"mmlu": MC, "gsm8k": MATH}, s, tmp_path, pool=pool, progress=False
    )
    assert res["scores"] == {"mmlu": mc, "gsm8k": math}
    rows = [json.loads(x) for x in (tmp_path / "samples" / "mmlu.jsonl").read_text().splitlines()]
    # what each grader read from `\boxed{(B)}`: the letter B (math_verify), `(B)` (paper)
    assert rows[0]["extracted"] == ("B" if grader == "math_verify" else "(B)")


def test_track1_greedy_suite():
    assert TRACK1_GREEDY.datasets == TRACK1.datasets and TRACK1_GREEDY.groups == TRACK1.groups
    assert (TRACK1_GREEDY.temperature, TRACK1_GREEDY.top_p, TRACK1_GREEDY.n) == (0.0, 1.0, 1)
    assert SUITES["track1_greedy"] is TRACK1_GREEDY
    assert suite_for(list(TRACK1.datasets)) is TRACK1  # averages: the same groups either way


def test_cli_settings_pin_and_refuse_bad_knobs():
    from clipo_megatron.eval.run import _settings

    base = dict(n=None, max_tokens=None, temperature=None, top_p=None, top_k=None, min_p=None)
    base.update(repetition_penalty=None, seed=0, chunk=4, limit=None, subset_seed=0, model="m")
    args = SimpleNamespace(**base, suite="track1_greedy", grader="paper")
    s = _settings(args, list(TRACK1.datasets))
    assert (s.temperature, s.top_p, s.top_k, s.repetition_penalty, s.grader) == (
        0.0,
        1.0,
        0,
        1.0,
        "paper",
    )
    bad = SimpleNamespace(**{**base, "top_k": -1}, suite="track1", grader="paper")
    with pytest.raises(ValueError, match="top_k=-1"):
        _settings(bad, list(TRACK1.datasets))
