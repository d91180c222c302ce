# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""paper_scores.json holds every printed number of every experiment table of the paper.

Read against the paper's LaTeX source (`../shared/paper/clipo-paper.tex` beside the checkout;
the tests that need it skip without it): each printed row, Δ rows included, is one entry of the
json at its line, with the same numbers in the same order, and no entry has no printed row.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clipo_megatron.paper.scores import PAPER_SCORES, all_rows, tables

ROOT = Path(__file__).resolve().parents[2]
TEX = ROOT.parent / "shared" / "paper" / "clipo-paper.tex"
needs_tex = pytest.mark.skipif(not TEX.is_file(), reason=f"needs the paper's source at {TEX}")
TABLES = tables(PAPER_SCORES)
# The paper's experiment tables, by LaTeX label: the four that print no result (the loss
# formulas, the hyper-parameters, the head parameters, the prompts) are not experiments.
NOT_EXPERIMENTS = {
    "tab:more_contrastiveloss",
    "tab:app_training_params",
    "tab:app_training_params_head",
    "tab:app_prompt_template",
}


def _cell(text: str) -> str:
    text = re.sub(
        r"\\cellcolor\{[^}]*\}|\\multirow\{[^}]*\}\{[^}]*\}|\\textbf|\\underline", "", text
    )
    return text.replace("{", "").replace("}", "").replace("$", "").strip()


def printed_rows(tex: list[str], label: str, label_columns: int) -> list[tuple[int, list[float]]]:
    """(line of the row's first cell, its numbers) of each row between \\midrule and
    \\bottomrule; a row may span lines (Table 2's Δ rows), a \\multicolumn line is a heading."""
    start = next(n for n, line in enumerate(tex) if f"\\label{{{label}}}" in line)
    first = next(n for n in range(start, len(tex)) if "\\midrule" in tex[n])
    end = next(n for n in range(first, len(tex)) if "\\bottomrule" in tex[n])
    rows, buf, at = [], "", 0
    for n in range(first + 1, end):
        line = tex[n].split("%")[0]
        if line.strip() in ("", "\\midrule", "\\hline") or "\\multicolumn" in line:
            continue
        at, buf = (at or n + 1), buf + " " + line
        if "\\\\" in line:
            cells = [_cell(c) for c in buf.split("\\\\")[0].split("&")]
            rows.append((at, [float(c) for c in cells[label_columns:]]))
            buf, at = "", 0
    return rows


@needs_tex
def test_every_experiment_table_of_the_paper_is_in_the_json():
    labels = set(re.findall(r"\\label\{(tab:[^}]+)\}", TEX.read_text(encoding="utf-8")))
    assert labels - NOT_EXPERIMENTS == {t["label"] for t in TABLES.values()}


@needs_tex
@pytest.mark.parametrize("key", list(TABLES))
def test_every_printed_number_is_in_the_json(key):
    tab = TABLES[key]
    tex = TEX.read_text(encoding="utf-8").splitlines()
    entries = {
        e["tex_line"]: (name, e)
        for part in ("rows", "deltas")
        for name, e in tab.get(part, {}).items()
    }
    printed = printed_rows(tex, tab["label"], tab["label_columns"])
    assert sorted(entries) == [line for line, _ in printed], "a printed row is missing or extra"
    for line, numbers in printed:
        name, entry = entries[line]
        stored = [entry[c] for c in tab["columns"] if c in entry]
        assert stored == numbers, f"{key}/{name} (line {line})"


@pytest.mark.parametrize("key", [k for k, t in TABLES.items() if t.get("deltas")])
def test_each_delta_row_is_its_rows_difference(key):
    """Δ = row - minus row, to the paper's rounding of each (0.011: two roundings of 0.005)."""
    tab = TABLES[key]
    for name, d in tab["deltas"].items():
        row, minus = (tab["rows"][r] for r in d["of"])
        for c in tab["columns"]:
            if c in d:
                assert abs(d[c] - (row[c] - minus[c])) <= 0.011, (key, name, c)


def test_no_track1_temperature_row_is_table1s_grpo_clipo():
    """docs/reproduce.md: Table 1's GRPO+CLIPO (Avg 63.26) is no row of the Track I
    temperature table (tau 0.05: 62.87, 0.02: 62.85), while Table 2's is its 0.02 row."""
    t1 = TABLES["table1"]["rows"]["GRPO+CLIPO"]
    taus = TABLES["table1_tau"]["rows"]
    assert (taus["0.05"]["Avg"], taus["0.02"]["Avg"], t1["Avg"]) == (62.87, 62.85, 63.26)
    cols = TABLES["table1"]["columns"]
    assert all(any(t1[c] != r[c] for c in cols) for r in taus.values())


def test_every_row_has_valid_settings():
    rows = all_rows()
    assert len(rows) == sum(len(t["rows"]) for t in TABLES.values())
    s = dict(((t, r), s) for t, r, s in rows)
    assert s["table2", "GRPO+CLIPO"].tau == 0.02 and s["table1", "GRPO+CLIPO"].tau == 0.05
    assert s["group_size_tau", "tau 0.05 G=32"].group_size == 32
    assert s["table3", "Track II CLIPO-fixed"].fixed_head and not s["table1", "Base"].trained
