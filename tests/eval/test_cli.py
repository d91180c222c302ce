# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron eval` end to end on a tiny random Llama (built here) and small local fixtures."""

import json
import os
import re

import pytest

pytest.importorskip("transformers")
pytest.importorskip("math_verify")
pytestmark = pytest.mark.runner

from clipo_megatron.eval.run import main  # noqa: E402
from clipo_testkit.tiny_models import save_tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    os.environ["HF_HUB_OFFLINE"] = "1"
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def fixtures(tmp_path):
    g = tmp_path / "gsm.jsonl"
    g.write_text(
        "".join(
            json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
            for i in range(4)
        )
    )
    m = tmp_path / "mmlu.jsonl"
    m.write_text(
        "".join(
            json.dumps({"question": f"Pick {i}", "choices": ["w", "x", "y", "z"], "answer": i})
            + "\n"
            for i in range(3)
        )
    )
    return g, m


def _args(tiny, g, m, out, *extra):
    return [
        "--datasets",
        "gsm8k,mmlu",
        "--model",
        str(tiny),
        "--backend",
        "hf",
        "--source",
        f"gsm8k={g}",
        "--source",
        f"mmlu={m}",
        "--limit",
        "3",
        "--max-tokens",
        "6",
        "--chunk",
        "2",
        "--out",
        str(out),
        "--verify-workers",
        "1",
        "--no-progress",
        *extra,
    ]


def test_eval_writes_results_samples_chart_and_throughput(tiny, fixtures, tmp_path, capsys):
    g, m = fixtures
    out = tmp_path / "run"
    assert main(_args(tiny, g, m, out)) == 0
    res = json.loads((out / "results.json").read_text())
    assert list(res["scores"]) == ["gsm8k", "mmlu"] and list(res["averages"]) == [
        "M-Avg",
        "G-Avg",
        "Avg",
    ]
    assert (
        res["settings"]["n"] == 1
        and res["settings"]["temperature"] == 0.6
        and res["settings"]["top_p"] == 0.95
    )
    assert res["datasets"]["gsm8k"]["questions"] == 3 and res["datasets"]["mmlu"]["samples"] == 3
    rows = [json.loads(x) for x in (out / "samples" / "gsm8k.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and rows[0]["prompt"].endswith("within \\boxed{}.")
    # A random 6-token model never closes a box: every verdict is 0 and the score says so.
    assert res["scores"]["gsm8k"] == 100 * sum(r["verdict"] for r in rows) / 3
    assert (out / "scores.png").read_bytes()[:4] == b"\x89PNG"
    assert "| GSM8K | MMLU | M-Avg | G-Avg | Avg |" in (out / "results.md").read_text()
    printed = capsys.readouterr().out
    assert "throughput:" in printed and "samples/s" in printed

    # Same command again: resumes, generates nothing.
    assert main(_args(tiny, g, m, out)) == 0
    assert json.loads((out / "results.json").read_text())["throughput"]["new_samples"] == 0
    capsys.readouterr()
    line = _refused(capsys, lambda: main(_args(tiny, g, m, out, "--n", "2")))
    assert re.search("holds an eval with other settings .*'n': \\(1, 2\\)", line), line

    out2 = tmp_path / "run2"
    assert main(_args(tiny, g, m, out2, "--seed", "1")) == 0
    cmp_dir = tmp_path / "cmp"
    assert (
        main(["compare", str(out), str(out2), "--names", "base,seed1", "--out", str(cmp_dir)]) == 0
    )
    c = json.loads((cmp_dir / "compare.json").read_text())
    assert c["baseline"] == "base" and set(c["deltas"]) == {"seed1"}
    assert "| Δ vs base |" in (cmp_dir / "compare.md").read_text()
    assert (cmp_dir / "compare.png").is_file()


def _refused(capsys, call) -> str:
    """The one stderr line of an eval refused with exit status 2."""
    with pytest.raises(SystemExit) as e:
        call()
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("clipo-megatron eval"), lines[0]
    return lines[0]


def test_missing_dataset_fails_before_loading_the_model(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CLIPO_DATA_DIR", raising=False)
    line = _refused(capsys, lambda: main(["--datasets", "aime", "--model", "smollm2"]))
    assert re.search(r"aime24: no source given.*--source aime24=hf", line), line
    line = _refused(capsys, lambda: main(["--suite", "track3", "--model", "smollm2"]))
    assert "unknown suite 'track3'" in line
    line = _refused(
        capsys, lambda: main(["--datasets", "gsm8k", "--source", "gsm8k", "--model", "smollm2"])
    )
    assert "NAME=SOURCE" in line
    assert main([]) == 2
    capsys.readouterr()
    line = _refused(capsys, lambda: main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]))
    assert "a does not exist: pass `clipo-megatron eval` output dirs" in line
