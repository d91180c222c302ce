# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Aggregates and deltas against the paper's own tables (Track I Table 1, Track II Table 2)."""

import json

import pytest

from clipo_megatron.eval.aggregate import averages, compare, dataset_score
from clipo_megatron.eval.report import bar_chart, markdown_table
from clipo_megatron.eval.suites import TRACK1, TRACK2, group_members, suite_for

T1 = list(TRACK1.datasets)
# Table 1 rows: GSM8K SYM P1 P2 cQA tQA thrmQA MMLU | M-Avg G-Avg Avg
BASE_1 = [86.05, 82.40, 70.90, 47.96, 73.63, 29.99, 24.90, 68.09], (71.83, 49.15, 60.49)
GRPO_1 = [87.79, 84.04, 73.12, 50.80, 74.94, 30.48, 27.71, 68.19], (73.94, 50.33, 62.13)
CLIPO_1 = [88.02, 84.62, 74.60, 54.16, 76.90, 31.52, 27.58, 68.64], (75.35, 51.16, 63.26)
DELTA_1 = [0.23, 0.58, 1.48, 3.36, 1.97, 1.04, -0.13, 0.46, 1.41, 0.83, 1.12]  # the paper's Δ row
# Table 2 base row: Math Math_S Math_H AMC AIME AIME25 | M-Avg C-Avg Avg
BASE_2 = [75.35, 59.24, 35.31, 44.13, 10.63, 6.25], (56.63, 20.33, 38.48)


@pytest.mark.parametrize("row", [BASE_1, GRPO_1, CLIPO_1])
def test_track1_averages_reproduce_table1(row):
    scores, (m, g, avg) = dict(zip(T1, row[0])), row[1]
    a = averages(scores)
    assert list(a) == ["M-Avg", "G-Avg", "Avg"]
    # The paper averages unrounded scores and prints 2 decimals: agreement to 0.01.
    assert a["M-Avg"] == pytest.approx(m, abs=0.01) and a["G-Avg"] == pytest.approx(g, abs=0.01)
    assert a["Avg"] == pytest.approx(avg, abs=0.01)


def test_track2_averages_reproduce_table2():
    a = averages(dict(zip(TRACK2.datasets, BASE_2[0])))
    # M-Avg = (75.35 + 59.24 + 35.31) / 3 = 56.633; C-Avg = (44.13 + 10.63 + 6.25) / 3 = 20.337;
    # Avg = (169.90 + 61.01) / 6 = 38.485 (mean over the six datasets, not of the two averages).
    assert a == pytest.approx({"M-Avg": 169.90 / 3, "C-Avg": 61.01 / 3, "Avg": 230.91 / 6})
    assert [round(v, 2) for v in a.values()] == pytest.approx([56.63, 20.34, 38.48], abs=1e-9)
    assert abs(a["C-Avg"] - BASE_2[1][1]) < 0.01


def test_delta_row_reproduces_the_papers():
    runs = {
        name: {**dict(zip(T1, r[0])), **averages(dict(zip(T1, r[0])))}
        for name, r in (("GRPO", GRPO_1), ("GRPO+CLIPO", CLIPO_1))
    }
    c = compare(runs)
    assert c["baseline"] == "GRPO" and c["columns"] == T1 + ["M-Avg", "G-Avg", "Avg"]
    assert list(c["deltas"]["GRPO+CLIPO"].values()) == pytest.approx(DELTA_1, abs=0.011)
    json.dumps(c)  # json-serialisable as written by `eval compare`


def test_dataset_score_and_partial_groups():
    assert dataset_score([1.0, 0.0, 1.0, 1.0]) == 75.0
    with pytest.raises(ValueError, match="no samples"):
        dataset_score([])
    # Only two Track I datasets: M-Avg over the one present math set, G-Avg over MMLU, Avg over both.
    assert averages({"gsm8k": 10.0, "mmlu": 40.0}) == {"M-Avg": 10.0, "G-Avg": 40.0, "Avg": 25.0}
    assert group_members(["gsm8k", "math500"]) == {
        "Avg": ["gsm8k", "math500"]
    }  # no suite holds both
    assert suite_for(["aime24"]) is TRACK2


def test_markdown_table_and_missing_columns():
    c = compare(
        {"a": {"gsm8k": 50.0, "Avg": 50.0}, "b": {"gsm8k": 62.5, "mmlu": 25.0, "Avg": 43.75}}
    )
    assert c["deltas"]["b"] == {"gsm8k": 12.5, "Avg": -6.25, "mmlu": None}
    assert markdown_table(c) == (
        "| run | GSM8K | Avg | MMLU |\n"
        "|---|---|---|---|\n"
        "| a | 50.00 | 50.00 | - |\n"
        "| b | 62.50 | 43.75 | 25.00 |\n"
        "| Δ vs a | +12.50 | -6.25 | - |\n"
    )
    with pytest.raises(ValueError, match="two or more runs"):
        compare({"a": {}})


def test_bar_chart_png(tmp_path):
    pytest.importorskip("matplotlib")
    p = bar_chart({"a": {"gsm8k": 50.0}, "b": {"gsm8k": 60.0, "Avg": 60.0}}, tmp_path / "c.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
