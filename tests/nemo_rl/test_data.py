# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Dataset processors (paper prompts, ground truths from the authors' parquet) and verifiable rewards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from clipo_megatron.nemo_rl.data import (
    MATH_INSTRUCTION,
    PROCESSORS,
    build_prompt,
    instruction_for,
    score_batch,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "clipo"


class _Tok:
    """Stand-in tokenizer: chat template = "<u>" + content + "<a>", one id per character."""

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, add_special_tokens):
        assert messages[0]["role"] == "user" and len(messages) == 1 and add_generation_prompt
        return "<u>" + messages[0]["content"] + "<a>"

    def __call__(self, text, return_tensors, add_special_tokens):
        return {"input_ids": torch.tensor([[ord(c) % 97 for c in text]])}


def test_prompts_follow_the_paper():
    assert build_prompt("What is 2+2?", "gsm8k") == "What is 2+2?\n" + MATH_INSTRUCTION
    assert (
        build_prompt("Q\n" + MATH_INSTRUCTION, "math") == "Q\n" + MATH_INSTRUCTION
    )  # no double suffix
    assert "(eg, A, B, C, D)" in instruction_for(
        "mmlu"
    ) and "(eg, A, B, C, D, E)" in instruction_for("commonsenseqa")
    with pytest.raises(ValueError, match="unknown dataset"):
        instruction_for("imagenet")


def test_processor_nemo_rl_layout_and_truncation():
    d = {
        "messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}],
        "task_name": "math",
    }
    out = PROCESSORS["clipo_gsm8k"](d, None, _Tok(), 1000, 3)
    assert out["message_log"][0]["content"] == "<u>1+1?\n" + MATH_INSTRUCTION + "<a>"
    assert out["length"] == len(out["message_log"][0]["content"]) and out["loss_multiplier"] == 1.0
    assert out["extra_env_info"] == {"ground_truth": "2", "clipo_kind": "math"} and out["idx"] == 3
    short = PROCESSORS["clipo_gsm8k"](d, None, _Tok(), 10, 0)
    assert short["loss_multiplier"] == 0.0 and short["message_log"][0]["token_ids"].numel() == 4


@pytest.mark.skipif(
    not DATA.exists(), reason="the paper's parquet files are not at ../shared/data/clipo"
)
def test_processor_on_the_authors_parquet():
    import pandas as pd

    gsm = pd.read_parquet(DATA / "train" / "gsm8k.parquet").iloc[0].to_dict()
    out = PROCESSORS["clipo_gsm8k"](gsm, None, _Tok(), 4096, 0)
    assert out["message_log"][0]["content"].count(MATH_INSTRUCTION) == 1
    assert out["extra_env_info"]["ground_truth"] == str(gsm["reward_model"]["ground_truth"])
    math_row = pd.read_parquet(DATA / "train" / "math75.parquet").iloc[0].to_dict()
    gt = PROCESSORS["clipo_math"](math_row, None, _Tok(), 4096, 0)["extra_env_info"]["ground_truth"]
    assert "\\boxed" not in gt and len(gt) < len(
        math_row["reward_model"]["ground_truth"]
    )  # last box only
    mmlu = pd.read_parquet(DATA / "test" / "mmlu2k.parquet").iloc[0].to_dict()
    out = PROCESSORS["clipo_mmlu"](mmlu, None, _Tok(), 8192, 0)
    assert out["extra_env_info"]["clipo_kind"] == "mc"


@pytest.mark.runner
def test_rewards_math_verify_and_letters():
    pytest.importorskip("math_verify")
    r = score_batch(
        [
            "so \\boxed{\\frac{1}{2}}",
            "\\boxed{0.5}",
            "\\boxed{3}",
            "no box",
            "\\boxed{B}",
            "\\boxed{(c)}",
        ],
        ["1/2", "\\frac12", "4", "4", "B", "D"],
        ["math", "math", "math", "math", "mc", "mc"],
    )
    assert r == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="unknown reward kind 'mmlu'"):
        score_batch(["\\boxed{B}"], ["B"], ["mmlu"])
    with pytest.raises(ValueError, match="ground truths"):
        score_batch(["a"], [])


def test_one_data_path_same_prompt_and_answer_for_one_row(tmp_path):
    """The runner's adapter, the eval loader's row parser and the NeMo-RL processor give the
    same prompt and gold answer for one GSM8K row (flat layout and the authors' verl layout)."""
    import json

    from clipo_megatron.data.files import row_to_record
    from clipo_megatron.data.registry import get_spec
    from clipo_megatron.nemo_rl.data import clipo_data_processor
    from clipo_megatron.runner.problems import jsonl_problems

    class Tok:  # the chat template is the identity on one user message
        def apply_chat_template(self, messages, **kw):
            return messages[-1]["content"]

        def __call__(self, text, **kw):
            import torch

            return {"input_ids": torch.zeros(1, len(text), dtype=torch.long)}

    q, sol = "Tom has 3 apples and buys 1,000 more. How many?", "3 + 1000 = 1003\n#### 1,003"
    verl = {
        "prompt": [{"role": "user", "content": q + "\n" + MATH_INSTRUCTION}],
        "reward_model": {"ground_truth": "1003"},
    }
    for row in ({"question": q, "answer": sol}, verl):
        f = tmp_path / "row.jsonl"
        f.write_text(json.dumps(row) + "\n")
        (runner,) = jsonl_problems(f, 0, one_shot=False)
        evaluated = row_to_record(row, 0, get_spec("gsm8k"), str(f))
        nemo = clipo_data_processor(row, None, Tok(), 4096, 0, dataset="gsm8k")
        want_prompt = q + "\n" + MATH_INSTRUCTION
        assert runner.prompt == evaluated.prompt == want_prompt
        assert nemo["message_log"][0]["content"] == want_prompt
        assert runner.ground_truth == evaluated.ground_truth == "1003"
        assert nemo["extra_env_info"]["ground_truth"] == "1003"
