# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Each dataset's instruction against the paper's appendix table (App. "Prompt Construction")."""

import re

import pytest

from clipo_megatron.data import templates
from clipo_megatron.data.registry import SPECS, canonical_name
from clipo_megatron.data.templates import build_prompt, format_choices, instruction_for
from tests.data.conftest import PAPER

# The appendix table, as printed (rows: dataset group -> instruction).
PAPER_TABLE = {
    "GSM8K / GSM-P1 / GSM-P2 / GSM-Symbolic": "Let's think step by step and output the final answer within \\boxed{}.",
    "MATH / AMC / AIME / AIME2025": "Let's think step by step and output the final answer within \\boxed{}.",
    "TheoremQA": "Let's think step by step and output the final answer within \\boxed{}.",
    "MMLU": "Let's think step by step and output the final answer (eg, A, B, C, D) within \\boxed{}.",
    "TruthfulQA": "Let's think step by step and output the final answer (eg, A, B, C, D, ...) within \\boxed{}.",
    "CommonsenseQA": "Let's think step by step and output the final answer (eg, A, B, C, D, E) within \\boxed{}.",
}
# Table row names -> our canonical names.
ROW_DATASETS = {
    "GSM8K / GSM-P1 / GSM-P2 / GSM-Symbolic": ["gsm8k", "gsm_p1", "gsm_p2", "gsm_symbolic"],
    "MATH / AMC / AIME / AIME2025": ["math500", "amc23", "aime24", "aime25"],
    "TheoremQA": ["theoremqa"],
    "MMLU": ["mmlu"],
    "TruthfulQA": ["truthfulqa"],
    "CommonsenseQA": ["commonsense_qa"],
}


@pytest.mark.parametrize("row", list(PAPER_TABLE))
def test_instruction_matches_the_appendix_table(row):
    for name in ROW_DATASETS[row]:
        assert instruction_for(name) == PAPER_TABLE[row], name


def test_table_text_is_the_papers():
    """Read the table out of the paper's LaTeX (when the paper is beside the repo) and compare."""
    if not PAPER.is_file():
        pytest.skip(f"paper not at {PAPER}")
    tex = PAPER.read_text()
    start = tex.index("\\label{tab:app_prompt_template}")
    body = tex[start : tex.index("\\end{tabularx}", start)]
    rows = {}
    for m in re.finditer(r"^(.+?) &\s*\n(.+?) \\\\\s*$", body, flags=re.M):
        name, text = m.group(1).strip(), m.group(2).strip()
        rows[name] = text.replace("\\textbackslash ", "\\").replace("\\{", "{").replace("\\}", "}")
    assert rows == PAPER_TABLE


def test_every_dataset_has_an_instruction_and_mc_ones_name_letters():
    for name, spec in SPECS.items():
        ins = templates.INSTRUCTIONS[name]
        assert ins.endswith("within \\boxed{}.")
        assert ("(eg, A, B" in ins) == (spec.kind == "mc"), name


def test_aliases():
    assert [
        canonical_name(n) for n in ("MATH", "mmlu2k", "aime", "AIME2025", "commonsenseqa", "amc")
    ] == ["math500", "mmlu", "aime24", "aime25", "commonsense_qa", "amc23"]
    with pytest.raises(ValueError, match="unknown dataset 'gsm9k'; known: aime24"):
        canonical_name("gsm9k")


def test_build_prompt_appends_once():
    p = build_prompt("What is 2+3?  ", "gsm8k")
    assert (
        p == "What is 2+3?\nLet's think step by step and output the final answer within \\boxed{}."
    )
    assert build_prompt(p, "gsm8k") == p  # the authors' files already carry it


def test_format_choices_is_the_authors_layout():
    assert format_choices("Q?", ["x", "y"]) == "Q?\n\nOptions:\nA. x\nB. y"
    with pytest.raises(ValueError, match="2..26 options"):
        format_choices("Q?", ["x"])


def test_the_worked_example_counts_correctly_and_verifies():
    """The small-model worked example (`records.ONE_SHOT`) teaches the format and a counting chain:
    a wrong count or answer would teach the model wrong arithmetic; the verifier must accept it."""
    from clipo_megatron.data.records import MATH, ONE_SHOT, Record
    from clipo_megatron.verify.boxed import verify_batch

    for question, answer in ONE_SHOT:
        a, op, b = re.fullmatch(r"Calculate (\d+) ([+-]) (\d+)\.", question).groups()
        a, b = int(a), int(b)
        want = a + b if op == "+" else a - b
        m = re.fullmatch(
            r"Start at (\d+) and count (up|down) (\d+): ([\d, ]+)\. So (\d+) ([+-]) (\d+) = (-?\d+)\. "
            r"The final answer is \\boxed\{(-?\d+)\}\.",
            answer,
        )
        assert m, answer
        start, way, steps, chain = int(m[1]), m[2], int(m[3]), [int(x) for x in m[4].split(", ")]
        assert (start, steps, way) == (a, b, "up" if op == "+" else "down")
        step = 1 if way == "up" else -1
        assert chain == [a + step * (i + 1) for i in range(b)]  # the count reaches the answer
        assert (int(m[5]), m[6], int(m[7])) == (a, op, b)
        assert int(m[8]) == int(m[9]) == want == chain[-1]
        assert verify_batch([answer], [str(want)]) == [1.0]
    msgs = Record(
        "Calculate 2 + 2.\n" + MATH, "4", "math", "x", 0, "basic_arithmetic", few_shot=True
    ).messages
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[2]["content"] == ONE_SHOT[0][1]
