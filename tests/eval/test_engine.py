# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The generate-grade-record loop with a fake generator: records, scores, resume without redoing work."""

import json
import zlib

import pytest

pytest.importorskip("math_verify")
pytestmark = pytest.mark.runner

from clipo_megatron.data.records import Record  # noqa: E402
from clipo_megatron.eval.engine import EvalSettings, evaluate  # noqa: E402
from clipo_megatron.verify.pool import VerifierPool  # noqa: E402

RECS = {
    "gsm8k": [Record(f"q{i}?\nLet's think", str(i), "math", "t", i, "gsm8k") for i in range(5)],
    "mmlu": [Record(f"m{i}?\nLet's think", "ABCD"[i % 4], "mc", "t", i, "mmlu") for i in range(3)],
}
GT = {r.prompt: r.ground_truth for rs in RECS.values() for r in rs}


class FakeGen:
    """Right (\\boxed{gt}) when crc32(prompt, seed, sample) is even, else no box; counts calls."""

    def __init__(self, fail_after=None):
        self.calls, self.fail_after = [], fail_after

    def generate(self, prompts, n, *, sampling, max_tokens, seed):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt  # the user pressed Ctrl-C
        self.calls.append((tuple(prompts), seed))
        return [
            [
                f"so \\boxed{{{GT[p]}}}" if zlib.crc32(f"{p}{seed}{s}".encode()) % 2 == 0 else "hmm"
                for s in range(n)
            ]
            for p in prompts
        ]


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(1) as p:
        yield p


def _expected(gen_calls, n):
    right = sum(
        zlib.crc32(f"{p}{seed}{s}".encode()) % 2 == 0
        for ps, seed in gen_calls
        for p in ps
        for s in range(n)
    )
    return right


def test_records_scores_and_throughput(tmp_path, pool):
    gen = FakeGen()
    s = EvalSettings(n=2, chunk=2, max_tokens=16)
    res = evaluate(gen, RECS, s, tmp_path, pool=pool, progress=False)
    assert len(gen.calls) == 3 + 2  # ceil(5/2) + ceil(3/2) chunks
    rows = [json.loads(x) for x in (tmp_path / "samples" / "gsm8k.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and set(rows[0]) >= {
        "prompt",
        "response",
        "extracted",
        "verdict",
        "ground_truth",
    }
    for r in rows:  # the verdict is the fake's coin, the extracted answer its box
        assert r["verdict"] == (1.0 if r["response"].startswith("so") else 0.0)
        assert r["extracted"] == (r["ground_truth"] if r["verdict"] else None)
    right = sum(r["verdict"] for r in rows)
    assert res["scores"]["gsm8k"] == pytest.approx(100 * right / 10)
    assert res["datasets"]["gsm8k"]["no_answer"] == 10 - right
    m = [json.loads(x) for x in (tmp_path / "samples" / "mmlu.jsonl").read_text().splitlines()]
    assert all(r["extracted"] == (r["ground_truth"] if r["verdict"] else None) for r in m)
    assert res["averages"]["Avg"] == pytest.approx(
        (res["scores"]["gsm8k"] + res["scores"]["mmlu"]) / 2
    )
    assert res["throughput"]["new_samples"] == 16 and res["throughput"]["samples_per_s"] > 0


def test_resume_after_interrupt_matches_an_uninterrupted_run(tmp_path, pool):
    s = EvalSettings(n=2, chunk=2, max_tokens=16)
    ref = evaluate(FakeGen(), RECS, s, tmp_path / "ref", pool=pool, progress=False)
    with pytest.raises(KeyboardInterrupt):
        evaluate(FakeGen(fail_after=2), RECS, s, tmp_path / "x", pool=pool, progress=False)
    assert (
        len((tmp_path / "x" / "samples" / "gsm8k.jsonl").read_text().splitlines()) == 8
    )  # 2 chunks x 2 q x n
    # A kill mid-write leaves a torn line: it is dropped and that sample redone.
    with (tmp_path / "x" / "samples" / "gsm8k.jsonl").open("a") as f:
        f.write('{"dataset": "gsm8k", "ind')
    gen = FakeGen()
    res = evaluate(gen, RECS, s, tmp_path / "x", pool=pool, progress=False)
    assert [len(p) for p, _ in gen.calls] == [
        1,
        2,
        1,
    ]  # only the rest: gsm8k chunk 3, both mmlu chunks
    assert res["scores"] == ref["scores"] and res["throughput"]["new_samples"] == 2 + 6
    a = sorted((tmp_path / "ref" / "samples" / "gsm8k.jsonl").read_text().splitlines())
    b = sorted((tmp_path / "x" / "samples" / "gsm8k.jsonl").read_text().splitlines())
    assert a == b  # same samples as if never interrupted
    gen = FakeGen()
    evaluate(gen, RECS, s, tmp_path / "x", pool=pool, progress=False)
    assert gen.calls == []  # finished: nothing regenerated


def test_partly_written_chunk_writes_only_missing_samples(tmp_path, pool):
    s = EvalSettings(n=2, chunk=5, max_tokens=16)
    recs = {"gsm8k": RECS["gsm8k"]}
    evaluate(FakeGen(), recs, s, tmp_path, pool=pool, progress=False)
    p = tmp_path / "samples" / "gsm8k.jsonl"
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines[:7]) + "\n")  # 3 samples lost
    evaluate(FakeGen(), recs, s, tmp_path, pool=pool, progress=False)
    assert sorted(p.read_text().splitlines()) == sorted(lines)
