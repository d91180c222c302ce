# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Local files (parquet or jsonl): the authors' verl layout, or flat question/answer rows.

verl layout (the authors' published files):
`prompt` = [{"role": "user", "content": question + instruction}],
`reward_model` = {"ground_truth": ...}, `data_source`, `extra_info.index`.
Flat rows: a question under `question|problem|Question|input|query|prompt`, an answer
under `answer|Answer|solution|answerKey|target`, and for multiple choice the
options under `choices|options` (a list, or {"label": [...], "text": [...]}).
GSM8K answers ("... #### 1,234") keep the number after "####"; a solution
keeps its last `\\boxed{}`; an integer answer to a multiple-choice row is
an option index (MMLU on the hub).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clipo_megatron.data.records import Record
from clipo_megatron.data.registry import DatasetSpec
from clipo_megatron.data.templates import build_prompt, format_choices
from clipo_megatron.verify.extract import clean_answer

_Q = ("question", "problem", "Question", "input", "query", "prompt")
_A = ("answer", "Answer", "solution", "answerKey", "target", "final_answer")
_C = ("choices", "options")


@dataclass(frozen=True)
class SizeCaps:
    """Bounds on what a data file may hold, checked as it is read, before any model loads: a
    200 MB question would run the box out of memory minutes into a run. The authors' files
    peak at 8 k characters a row (math75) and 3 MB a file. `*_key`: the knob that raises a cap,
    for the message (the runner's config keys; the eval suites use these defaults)."""

    max_row_chars: int = 65_536
    max_file_mb: int = 1024
    row_key: str = "max_row_chars"
    file_key: str = "max_file_mb"


def _row_too_long(where: str, size: int, caps: SizeCaps) -> ValueError:
    return ValueError(
        f"{where}: a row of {size:,} characters, over {caps.row_key}={caps.max_row_chars:,}; "
        f"drop the row or raise {caps.row_key}"
    )


def _object_row(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ValueError(
            f'{where}: a row must be a JSON object ({{"question": ..., "answer": ...}}), '
            f"got {type(row).__name__} {str(row)[:40]!r}"
        )
    return row


def read_rows(
    path: str | Path, caps: SizeCaps | None = None, *, lines: list[int] | None = None
) -> list[dict[str, Any]]:
    """Rows of a .parquet / .jsonl / .json(l) file as dicts, within `caps` (ValueError naming
    file:line and the knob otherwise; a row that is not an object is named the same way).
    A UTF-8 BOM and CRLF line ends (as Windows editors save) read like the clean file. `lines`,
    when given, receives each jsonl row's 1-based line number (blank lines are skipped)."""
    caps = caps or SizeCaps()
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {p} does not exist")
    size_mb = p.stat().st_size / 2**20
    if size_mb > caps.max_file_mb:  # before reading a byte of it
        raise ValueError(
            f"{p}: {size_mb:,.1f} MB, over {caps.file_key}={caps.max_file_mb:,} MB; "
            f"split the file or raise {caps.file_key}"
        )
    if p.suffix == ".parquet":
        import pandas as pd

        try:
            rows = pd.read_parquet(p).to_dict("records")
        except Exception as e:  # pyarrow's many error types: one line naming the file
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise ValueError(f"{p}: not a readable parquet file ({reason})") from None
        for i, row in enumerate(rows):
            size = len(json.dumps(row, default=str))
            if size > caps.max_row_chars:
                raise _row_too_long(f"{p} row {i}", size, caps)
        return rows
    if p.suffix in (".jsonl", ".json"):
        try:
            text = p.read_text(encoding="utf-8-sig")  # a leading BOM is not part of line 1
        except UnicodeDecodeError as e:  # was a bare UnicodeDecodeError naming no file
            lineno = p.read_bytes()[: e.start].count(b"\n") + 1
            raise ValueError(
                f"{p}:{lineno}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                f"{e.start}); save the file as UTF-8"
            ) from None
        if p.suffix == ".json" and text.lstrip().startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{e.lineno}: not JSON ({e.msg})") from None
            for i, row in enumerate(items):
                _object_row(row, f"{p} item {i}")
                size = len(json.dumps(row))
                if size > caps.max_row_chars:
                    raise _row_too_long(f"{p} item {i}", size, caps)
            return items
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            if len(line) > caps.max_row_chars:  # before parsing it
                raise _row_too_long(f"{p}:{n}", len(line), caps)
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p} line {n} is not JSON: {e}") from None
            rows.append(_object_row(row, f"{p}:{n}"))
            if lines is not None:
                lines.append(n)
        return rows
    raise ValueError(f"{p}: unsupported file type {p.suffix!r}; use .parquet or .jsonl")


def _content(prompt: Any) -> str:
    """The user text of a verl `prompt` (a list/array of messages) or a plain string."""
    if isinstance(prompt, str):
        return prompt
    msgs = list(prompt)
    users = [m for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise ValueError(f"verl prompt has no user message: {msgs!r:.200}")
    return str(users[-1]["content"])


def _choices(c: Any) -> list[str]:
    if isinstance(c, dict):  # {"label": [...], "text": [...]} (CommonsenseQA)
        return [str(t) for t in list(c["text"])]
    return [str(t) for t in list(c)]


def _mc_answer(a: Any) -> str:
    if isinstance(a, int) or (isinstance(a, str) and a.strip().isdigit()):  # an option index
        return chr(65 + int(a))
    return str(a).strip().strip("()").upper()


class EmptyAnswer(ValueError):
    """A row whose answer is empty: every response to it is graded wrong (named, counted)."""


def _no_empty_answer(gt: Any, where: str) -> None:
    if gt is None or not clean_answer(gt):
        raise EmptyAnswer(f"{where}: its answer is empty ({gt!r:.40})")


def row_to_record(
    row: dict[str, Any],
    i: int,
    spec: DatasetSpec,
    source: str,
    *,
    allow_empty: bool = False,
    where: str | None = None,
) -> Record:
    """One row (verl or flat) -> Record with the paper's prompt; ValueError naming the missing
    field, or `EmptyAnswer` for an empty (or null) answer unless `allow_empty`. `where` names the
    row in messages (a jsonl's `file:line`; default `<source> row <i>`)."""
    where = where or f"{source} row {i}"
    if "prompt" in row and "reward_model" in row:  # verl layout
        rm = row["reward_model"]
        gt = rm["ground_truth"] if isinstance(rm, dict) else rm
        if not allow_empty:
            _no_empty_answer(gt, where)
        info = row.get("extra_info") or {}
        index = int(info.get("index", i)) if isinstance(info, dict) else i
        return Record(
            build_prompt(_content(row["prompt"]), spec.name),
            clean_answer("" if gt is None else gt),
            spec.kind,
            str(row.get("data_source") or source),
            index,
            spec.name,
        )
    q = next((row[k] for k in _Q if k in row), None)
    a = next((row[k] for k in _A if k in row), None)
    if a is None and any(k in row for k in _A):  # the column is there, its value null: empty
        if not allow_empty:
            raise EmptyAnswer(f"{where}: its answer is empty (null)")
        a = ""
    if q is None or a is None:
        raise ValueError(
            f"{where}: needs a question ({'|'.join(_Q)}) and an answer ({'|'.join(_A)}) "
            f"or the verl columns prompt/reward_model; has {sorted(row)}"
        )
    if not allow_empty:
        _no_empty_answer(a, where)
    c = next((row[k] for k in _C if k in row), None)
    if spec.kind == "mc":
        if c is not None:
            q = format_choices(str(q), _choices(c))
        gt = _mc_answer(a)
    else:
        gt = clean_answer(a)
    return Record(build_prompt(str(q), spec.name), gt, spec.kind, source, i, spec.name)


def load_file(path: str | Path, spec: DatasetSpec, caps: SizeCaps | None = None) -> list[Record]:
    lines: list[int] = []
    rows = read_rows(path, caps, lines=lines)
    if not rows:
        raise ValueError(f"{path} has no rows")
    label = (lambda i: f"line {lines[i]}") if lines else None  # a jsonl: the editor's line
    return records_with_answers(enumerate(rows), spec, str(path), label=label)


def records_with_answers(
    rows: Iterable[tuple[int, dict[str, Any]]],
    spec: DatasetSpec,
    source: str,
    label: Callable[[int], str] | None = None,
) -> list[Record]:
    """Records of (index, row) pairs. Rows with an empty answer are kept as published and
    counted in one line on stderr (the authors' math75 has 2 of 7500: every response to them
    scores 0); a file of nothing else is refused."""
    label = label or (lambda i: f"row {i}")
    records, empty = [], []
    for i, r in rows:
        where = f"{source} {label(i)}"
        try:
            records.append(row_to_record(r, i, spec, source, where=where))
        except EmptyAnswer:
            empty.append(label(i))
            records.append(row_to_record(r, i, spec, source, allow_empty=True, where=where))
    if empty and len(empty) == len(records):
        raise ValueError(f"{source}: every row's answer is empty; fill the answers in")
    if empty:
        shown = ", ".join(empty[:5]) + (" ..." if len(empty) > 5 else "")
        print(
            f"[clipo-megatron] {source}: {len(empty)} row(s) with an empty answer ({shown}): "
            "every response to them scores 0",
            file=sys.stderr,
        )
    return records
