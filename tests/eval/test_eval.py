# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The eval suite on CPU with a fake generator: averages, deltas, resume, records, the command."""

from __future__ import annotations

import json

import pytest

from clipo_megatron.data.records import Record
from clipo_megatron.eval.aggregate import averages, compare, dataset_score
from clipo_megatron.eval.engine import EvalSettings, evaluate, extracted_answer
from clipo_megatron.eval.report import markdown_table
from clipo_megatron.eval.suites import TRACK1, TRACK2, get_suite


class FakeGen:
    """Answers `\\boxed{<gt>}` for even indices, a wrong box for odd ones; counts prompts generated."""

    def __init__(self, answers: dict[str, str]):
        self.answers, self.calls = answers, 0

    def generate(self, prompts, n, *, sampling, max_tokens, seed):
        self.calls += len(prompts)
        return [[self.answers[p]] * n for p in prompts]


def _records(k: int, kind: str = "math"):
    recs, answers = [], {}
    for i in range(k):
        gt = str(i + 10) if kind == "math" else "ABCD"[i % 4]
        r = Record(prompt=f"q{kind}{i}", ground_truth=gt, kind=kind, data_source="t", index=i)
        wrong = "999" if kind == "math" else ("B" if gt == "A" else "A")
        answers[r.prompt] = f"so \\boxed{{{gt if i % 2 == 0 else wrong}}}"
        recs.append(r)
    return recs, answers


def test_suite_averages_match_hand_computation():
    s1 = dict(zip(TRACK1.datasets, [80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 20.0, 10.0]))
    a = averages(s1)
    assert a == {"M-Avg": 65.0, "G-Avg": 25.0, "Avg": 45.0}
    s2 = dict(zip(TRACK2.datasets, [60.0, 30.0, 30.0, 40.0, 10.0, 10.0]))
    assert averages(s2) == {"M-Avg": 40.0, "C-Avg": 20.0, "Avg": 30.0}
    assert averages({"gsm8k": 10.0, "mmlu": 30.0}) == {"M-Avg": 10.0, "G-Avg": 30.0, "Avg": 20.0}
    assert dataset_score([1.0, 0.0, 0.0, 1.0]) == 50.0
    assert (TRACK1.n, TRACK2.n, TRACK1.temperature, TRACK1.top_p) == (1, 16, 0.6, 0.95)
    with pytest.raises(ValueError, match="unknown suite"):
        get_suite("track3")


def test_compare_deltas_and_markdown():
    cmp = compare(
        {"base": {"gsm8k": 50.0, "Avg": 40.0}, "clipo": {"gsm8k": 52.5, "Avg": 39.0, "mmlu": 1.0}}
    )
    assert cmp["deltas"]["clipo"] == {"gsm8k": 2.5, "Avg": -1.0, "mmlu": None}
    md = markdown_table(cmp)
    assert "| Δ vs base | +2.50 | -1.00 | - |" in md and "| GSM8K |" in md.splitlines()[0].replace(
        "run | ", ""
    )
    with pytest.raises(ValueError, match="two or more"):
        compare({"a": {}})


def test_extracted_answer_edge_cases():
    assert extracted_answer("\\boxed{1} then \\boxed{\\frac{1}{2}}", "math") == "\\frac{1}{2}"
    assert extracted_answer("no box", "math") is None
    assert extracted_answer("\\boxed{(B).}", "mc") == "B"


def test_evaluate_scores_records_and_resumes(tmp_path):
    math, a1 = _records(5)
    mc, a2 = _records(4, "mc")
    gen = FakeGen({**a1, **a2})
    st = EvalSettings(n=2, chunk=2)
    res = evaluate(gen, {"gsm8k": math, "mmlu": mc}, st, tmp_path, progress=False)
    assert res["scores"] == {"gsm8k": 60.0, "mmlu": 50.0}
    assert res["averages"] == {"M-Avg": 60.0, "G-Avg": 50.0, "Avg": 55.0}
    assert res["throughput"]["new_samples"] == 18 and gen.calls == 9
    rows = [json.loads(x) for x in (tmp_path / "samples" / "gsm8k.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and {"prompt", "response", "extracted", "verdict"} <= set(rows[0])
    assert rows[0]["extracted"] == "10" and rows[0]["verdict"] == 1.0
    # Interrupt: drop the last chunk of mmlu and tear a line; the resume regenerates only that chunk.
    p = tmp_path / "samples" / "mmlu.jsonl"
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines[:4]) + "\n" + lines[4][:10])
    gen2 = FakeGen({**a1, **a2})
    res2 = evaluate(gen2, {"gsm8k": math, "mmlu": mc}, st, tmp_path, progress=False)
    assert gen2.calls == 2 and res2["throughput"]["new_samples"] == 4
    assert res2["scores"] == res["scores"]


def test_command_end_to_end_with_fake_generator(tmp_path, monkeypatch, capsys):
    from clipo_megatron.eval import run

    d = tmp_path / "data"
    d.mkdir()
    rows = [{"question": f"What is {i}+1?", "answer": f"#### {i + 1}"} for i in range(4)]
    (d / "g.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(
        "clipo_megatron.eval.generator.build_generator",
        lambda *a, **k: type(
            "G", (), {"generate": lambda self, p, n, **kw: [["\\boxed{1}"] * n for _ in p]}
        )(),
    )
    out = tmp_path / "o"
    argv = [
        "--datasets",
        "gsm8k",
        "--source",
        f"gsm8k={d / 'g.jsonl'}",
        "--model",
        "smollm2",  # checked by name; the generator is the fake above
        "--out",
        str(out),
        "--no-progress",
        "--verify-workers",
        "1",
    ]
    assert run.main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    assert (
        res["datasets"]["gsm8k"]["questions"] == 4 and res["scores"]["gsm8k"] == 25.0
    )  # only "0+1" is 1
    assert (out / "scores.png").stat().st_size > 1000
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # one line, exit 2
        run.main(argv + ["--n", "2"])
    assert e.value.code == 2 and "other settings" in capsys.readouterr().err
    (tmp_path / "o2").mkdir()
    (out.parent / "o2" / "results.json").write_text(
        json.dumps({**res, "scores": {"gsm8k": 50.0}, "averages": {"Avg": 50.0}})
    )
    assert run.main(["compare", str(out), str(tmp_path / "o2"), "--out", str(tmp_path / "c")]) == 0
    cmp = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert cmp["deltas"]["o2"]["gsm8k"] == 25.0


def test_missing_dataset_is_a_clear_error(tmp_path, capsys):
    from clipo_megatron.eval import run

    with pytest.raises(SystemExit) as e:
        run.main(
            [
                "--datasets",
                "gsm8k",
                "--data-dir",
                str(tmp_path),
                "--model",
                "smollm2",
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert e.value.code == 2 and "gsm8k" in capsys.readouterr().err
