# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A local jsonl as a Windows editor saves it (UTF-8 BOM, CRLF line ends) trains like the clean
file; a null answer is named by its 1-based line and called empty."""

from __future__ import annotations

import json

from clipo_megatron.data.files import load_file
from clipo_megatron.data.registry import SPECS

ROWS = [{"question": "1+1?", "answer": "2"}, {"question": "2+2?", "answer": "4"}]


def test_bom_and_crlf_read_like_the_clean_file(tmp_path):
    clean, saved = tmp_path / "clean.jsonl", tmp_path / "windows.jsonl"
    text = "\n".join(json.dumps(r) for r in ROWS) + "\n"
    clean.write_text(text, encoding="utf-8")
    saved.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    spec = SPECS["gsm8k"]
    ours = [(r.prompt, r.ground_truth) for r in load_file(saved, spec)]
    assert ours == [(r.prompt, r.ground_truth) for r in load_file(clean, spec)]


def test_a_null_answer_is_named_by_its_line(tmp_path, capsys):
    path = tmp_path / "d.jsonl"
    rows = [*ROWS, {"question": "3+3?", "answer": None}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    records = load_file(path, SPECS["gsm8k"])
    assert len(records) == 3 and records[2].ground_truth == ""
    err = capsys.readouterr().err
    assert f"{path}: 1 row(s) with an empty answer (line 3)" in err
