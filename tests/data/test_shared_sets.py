# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The authors' published sets at ../shared/data/clipo: row counts, prompts, ground truths."""

import pytest

from clipo_megatron.data import SPECS, load_dataset
from clipo_megatron.data.templates import instruction_for
from clipo_megatron.verify.choice import extract_choice

pytest.importorskip("pandas")

# data/README.md's table
ROWS = {
    "gsm8k_train": 7473,
    "math_train": 7500,
    "gsm8k": 1319,
    "gsm_symbolic": 5000,
    "gsm_p1": 5000,
    "gsm_p2": 2500,
    "commonsense_qa": 1221,
    "truthfulqa": 1634,
    "theoremqa": 1494,
    "mmlu": 2000,
    "math500": 500,
    "math_perturb_simple": 279,
    "math_perturb_hard": 279,
    "amc23": 83,
    "aime24": 30,
    "aime25": 30,
}


@pytest.mark.parametrize("name", list(ROWS))
def test_row_counts_prompts_and_answers(shared_data, name):
    recs = load_dataset(name, data_dir=shared_data)
    assert len(recs) == ROWS[name] == SPECS[name].rows
    ins = instruction_for(name)
    # The authors' prompts already end with the paper's instruction: nothing appended twice.
    assert all(
        r.prompt.endswith(ins) and r.prompt.count("Let's think step by step") == 1 for r in recs
    )
    assert [r.index for r in recs] == list(range(len(recs)))
    # Two MATH training solutions end in an empty \boxed{} in the published file (a defect of the data).
    empty = {r.index for r in recs if not r.ground_truth.strip()}
    assert empty == ({5341, 5343} if name == "math_train" else set())
    if SPECS[name].kind == "mc":
        assert all(extract_choice(r.ground_truth) == r.ground_truth for r in recs)
        assert all("\nOptions:\nA. " in r.prompt for r in recs)
    else:
        assert not any("\\boxed" in r.ground_truth for r in recs)
