# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The real thing, small: SmolLM2-135M-Instruct on a fixed subset of the authors' GSM8K / MMLU test sets.

The docs' run (docs/eval.md) is the same command with --limit 20 --max-tokens 256.
Its wall time is reported by `python bench/bench_eval.py --smollm2`, not asserted here:
a test asserts behaviour, and on a loaded 2-core machine the time says nothing about it.
"""

import json
import os

import pytest

pytest.importorskip("transformers")
pytest.importorskip("math_verify")
pytestmark = [pytest.mark.slow, pytest.mark.runner]

from clipo_megatron.eval.run import main  # noqa: E402
from tests.data.conftest import SHARED  # noqa: E402


def test_smollm2_on_shared_gsm8k_and_mmlu_subset(tmp_path, capsys):
    if not (SHARED / "test").is_dir():
        pytest.skip(f"the authors' parquet files are not at {SHARED}")
    try:
        from clipo_megatron.models.smollm2 import smollm2_gguf_path

        smollm2_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    os.environ["HF_HUB_OFFLINE"] = "1"
    argv = [
        "--datasets",
        "gsm8k,mmlu",
        "--model",
        "smollm2",
        "--backend",
        "hf",
        "--data-dir",
        str(SHARED),
        "--limit",
        "4",
        "--max-tokens",
        "96",
        "--chunk",
        "4",
        "--threads",
        "2",
        "--out",
        str(tmp_path),
        "--verify-workers",
        "1",
        "--no-progress",
    ]
    assert main(argv) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    rows = [json.loads(x) for x in (tmp_path / "samples" / "gsm8k.jsonl").read_text().splitlines()]
    # The fixed subset (seed 0): the same questions every time.
    assert [r["index"] for r in rows] == [355, 673, 838, 1119]
    assert all(r["status"] == "ok" and r["response"] for r in rows)
    for name in ("gsm8k", "mmlu"):
        d = res["datasets"][name]
        assert d["samples"] == 4 and 0.0 <= res["scores"][name] <= 100.0
        assert res["scores"][name] == 100.0 * d["correct"] / 4
    assert "throughput:" in capsys.readouterr().out
