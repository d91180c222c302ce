# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron eval paper`: finished runs beside the paper's row, with their spread."""

from __future__ import annotations

import json

import pytest

from clipo_megatron.cli import main as cli_main
from clipo_megatron.eval.aggregate import averages


def _fake_eval(path, scores):
    """A finished `clipo-megatron eval` output: results.json as eval writes it."""
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({"scores": scores, "averages": averages(scores)}))
    return str(path)


def test_two_seeds_beside_table2s_grpo_clipo(tmp_path, capsys):
    # Table 2, GRPO+CLIPO: Math 77.49, Math_S 67.21, Math_H 38.97, AMC 49.17, AIME 18.13, AIME25 10.63
    a = {"math500": 78.0, "math_perturb_simple": 66.0, "math_perturb_hard": 39.0}
    a |= {"amc23": 50.0, "aime24": 18.0, "aime25": 10.0}
    b = {**a, "math500": 77.0, "aime24": 20.0}  # seed 2 differs on two datasets
    runs = [_fake_eval(tmp_path / n, s) for n, s in (("seed1", a), ("seed2", b))]
    out = tmp_path / "cmp"
    rc = cli_main(["eval", "paper", "table2/GRPO+CLIPO", *runs, "--out", str(out)])
    assert rc == 0
    cmp = json.loads((out / "paper.json").read_text())
    assert cmp["row"] == "table2/GRPO+CLIPO" and list(cmp["runs"]) == ["seed1", "seed2"]
    # Math: mean(78, 77) = 77.5; 77.5 - 77.49 = 0.01; sd of (78, 77) = sqrt(0.5) = 0.7071
    assert cmp["mean"]["math500"] == pytest.approx(77.5)
    assert cmp["difference"]["math500"] == pytest.approx(0.01)
    assert cmp["spread"]["math500"] == pytest.approx(0.5**0.5)
    # AIME: (18 + 20) / 2 = 19 - 18.13 = 0.87, sd sqrt(2) = 1.4142; AMC the same in both: sd 0
    assert cmp["difference"]["aime24"] == pytest.approx(0.87)
    assert cmp["spread"]["aime24"] == pytest.approx(2**0.5) and cmp["spread"]["amc23"] == 0
    # Avg: seed 1 mean(78, 66, 39, 50, 18, 10) = 261 / 6 = 43.5, seed 2 262 / 6 = 43.6667;
    # mean 43.5833 - 43.60 = -1/60
    assert cmp["difference"]["Avg"] == pytest.approx(-1 / 60)
    assert cmp["n"]["Avg"] == 2
    md = (out / "paper.md").read_text()
    assert "| Math | 77.49 | 78.00 | 77.00 | 77.50 | +0.01 | 0.71 | 2 |" in md
    assert md == capsys.readouterr().out.split("wrote ")[0].rstrip("\n") + "\n"


def test_one_run_has_no_spread_and_a_missing_column_none(tmp_path):
    run = _fake_eval(tmp_path / "only", {"gsm8k": 88.0, "gsm_p2": 54.0})
    out = tmp_path / "cmp"
    assert cli_main(["eval", "paper", "table1/GRPO+CLIPO", run, "--out", str(out)]) == 0
    cmp = json.loads((out / "paper.json").read_text())
    assert cmp["difference"]["gsm8k"] == pytest.approx(88.0 - 88.02)
    assert cmp["spread"]["gsm8k"] is None and cmp["n"]["gsm8k"] == 1
    assert cmp["mean"]["mmlu"] is None and cmp["difference"]["mmlu"] is None
    assert len(cmp["columns"]) == 11  # the row's printed columns, all of them


def test_averages_only_rows_and_bad_inputs(tmp_path, capsys):
    """Table 3 prints averages only (Track II: M-Avg, C-Avg, Avg); errors are one line, exit 2."""
    run = _fake_eval(tmp_path / "r", {"math500": 80.0, "amc23": 50.0})
    out = tmp_path / "cmp"
    assert cli_main(["eval", "paper", "table3/Track II CLIPO-fixed", run, "--out", str(out)]) == 0
    cmp = json.loads((out / "paper.json").read_text())
    assert cmp["columns"] == ["M-Avg", "C-Avg", "Avg"]
    assert cmp["difference"]["M-Avg"] == pytest.approx(80.0 - 60.19)
    for argv, msg in (
        (["table1", run], "give TABLE/ROW"),
        (["table1/PPO", run], "no row 'PPO' in table1"),
        (["table1/GRPO", str(tmp_path / "none")], "does not exist"),
    ):
        with pytest.raises(SystemExit) as e:
            cli_main(["eval", "paper", *argv, "--out", str(tmp_path / "x")])
        assert e.value.code == 2 and msg in capsys.readouterr().err
