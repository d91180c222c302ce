# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A local jsonl as a Windows editor saves it (UTF-8 BOM, CRLF line ends) trains like the clean
file; a null answer is an empty answer, named as the file's reader counts: a jsonl's line, a
parquet's or a JSON array's row, from 1 (issue 51: "line 1 is not JSON: Unexpected UTF-8 BOM",
and a null answer on line 3 was "row 2: needs a question ... and an answer")."""

from __future__ import annotations

import json

import pytest

from clipo_megatron.data.files import load_file, read_rows
from clipo_megatron.data.registry import SPECS

ROWS = [{"question": "1+1?", "answer": "2"}, {"question": "2+2?", "answer": "4"}]
NULL = {"question": "3+3?", "answer": None}


def _jsonl(rows) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def test_bom_and_crlf_read_like_the_clean_file(tmp_path):
    clean, saved = tmp_path / "clean.jsonl", tmp_path / "windows.jsonl"
    clean.write_text(_jsonl(ROWS), encoding="utf-8")
    saved.write_bytes(b"\xef\xbb\xbf" + _jsonl(ROWS).replace("\n", "\r\n").encode("utf-8"))
    spec = SPECS["gsm8k"]
    ours = [(r.prompt, r.ground_truth) for r in load_file(saved, spec)]
    assert ours == [(r.prompt, r.ground_truth) for r in load_file(clean, spec)]


def test_a_json_string_with_a_line_separator_is_one_line(tmp_path):
    path = tmp_path / "d.jsonl"  # U+2028 is valid inside a JSON string; splitlines() splits it
    path.write_text(_jsonl([{"question": "a\u2028b?", "answer": "1"}, NULL]), encoding="utf-8")
    labels: list[str] = []
    assert read_rows(path, labels=labels)[0]["question"] == "a\u2028b?"
    assert labels == ["line 1", "line 2"]


@pytest.mark.parametrize("blank", ["", "\n"])  # a blank line counts as a line, not as a row
def test_a_null_answer_is_named_by_its_line(tmp_path, capsys, blank):
    path = tmp_path / "d.jsonl"
    path.write_text(blank + _jsonl([*ROWS, NULL]), encoding="utf-8")
    records = load_file(path, SPECS["gsm8k"])
    assert len(records) == 3 and records[2].ground_truth == ""
    line = 3 + len(blank)
    err = capsys.readouterr().err
    assert f"{path}: 1 row(s) with an empty answer (line {line}): every response" in err


def test_a_null_answer_in_a_parquet_or_json_array_is_named_by_its_row(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    pq, arr = tmp_path / "d.parquet", tmp_path / "d.json"
    pd.DataFrame([*ROWS, NULL]).to_parquet(pq)
    arr.write_text(json.dumps([*ROWS, NULL]), encoding="utf-8")
    for path, named in ((pq, "row 3"), (arr, "item 3")):
        load_file(path, SPECS["gsm8k"])
        assert f"{path}: 1 row(s) with an empty answer ({named})" in capsys.readouterr().err


def test_a_null_question_is_named(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(_jsonl([*ROWS, {"question": None, "answer": "6"}]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"d.jsonl line 3: its question \(question\) is null"):
        load_file(path, SPECS["gsm8k"])
