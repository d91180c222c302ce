# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Local jsonl problems (GSM8K / MATH layouts) for users who bring their own data."""

from __future__ import annotations

import json

import pytest

from clipo_megatron.runner.problems import jsonl_problems
from clipo_megatron.verify.extract import clean_answer

pytestmark = [pytest.mark.runner]


def test_gsm8k_and_math_answers():
    assert clean_answer("3 + 4 = 7 apples\n#### 1,007") == "1007"
    assert clean_answer("so $x = \\boxed{\\frac{1}{2}}$ and \\boxed{\\sqrt{3}}") == "\\sqrt{3}"
    assert clean_answer(" 12 ") == "12"


def test_jsonl_rows_and_errors(tmp_path):
    f = tmp_path / "gsm.jsonl"
    f.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"question": "1+1?", "answer": "#### 2"},
                {"problem": "2+2?", "solution": "\\boxed{4}"},
            ]
        )
        + "\n"
    )
    ps = jsonl_problems(f, 0)
    assert [p.ground_truth for p in ps] == ["2", "4"]
    assert ps[0].prompt.startswith("1+1?\n") and "\\boxed{}" in ps[0].prompt
    assert len(jsonl_problems(f, 1)) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"q": "x"}) + "\n")
    with pytest.raises(ValueError, match="line 1: needs a question"):
        jsonl_problems(bad, 0)
    with pytest.raises(FileNotFoundError, match="local jsonl"):
        jsonl_problems(tmp_path / "missing.jsonl", 1)


def test_parallel_config_errors(mcore_single_process):
    pytest.importorskip("megatron.core")
    from clipo_megatron.runner.config import load_config
    from clipo_megatron.runner.parallel import init_distributed

    with pytest.raises(ValueError, match=r"parallel.pp=0 must be an int in \[1, 1024\]"):
        load_config(None, ["parallel.pp=0"])
    with pytest.raises(ValueError, match=r"parallel.tp=0 must be an int in \[1, 1024\]"):
        load_config(None, ["parallel.tp=0"])
    with pytest.raises(
        ValueError, match=r"parallel.tp \* parallel.pp = 2 but 1 processes were launched"
    ):
        init_distributed(2, 1)
