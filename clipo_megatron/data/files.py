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
    path: str | Path, caps: SizeCaps | None = None, *, labels: list[str] | None = None
) -> list[dict[str, Any]]:
    """Rows of a .parquet / .jsonl / .json(l) file as dicts, within `caps` (ValueError naming
    file:line and the knob otherwise; a row that is not an object is named the same way).
    A UTF-8 BOM and CRLF line ends (as Windows editors save) read like the clean file. `labels`,
    when given, receives how each row is named in messages, counted from 1 as an editor counts:
    `line 3` of a jsonl (blank lines skipped but counted), `row 3` of a parquet, `item 3` of a
    JSON array."""
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
        # pandas reads a null cell as NaN (or pd.NA): None, as in a jsonl, not the answer "nan"
        rows = [{k: None if _is_null(v, pd.NA) else v for k, v in r.items()} for r in rows]
        for i, row in enumerate(rows, 1):
            size = len(json.dumps(row, default=str))
            if size > caps.max_row_chars:
                raise _row_too_long(f"{p} row {i}", size, caps)
        _label(labels, "row", range(1, len(rows) + 1))
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
            for i, row in enumerate(items, 1):
                _object_row(row, f"{p} item {i}")
                size = len(json.dumps(row))
                if size > caps.max_row_chars:
                    raise _row_too_long(f"{p} item {i}", size, caps)
            _label(labels, "item", range(1, len(items) + 1))
            return items
        rows, numbers = [], []
        for n, line in enumerate(text.split("\n"), 1):  # not splitlines: U+2028 is JSON text
            line = line.removesuffix("\r")
            if not line.strip():
                continue
            if len(line) > caps.max_row_chars:  # before parsing it
                raise _row_too_long(f"{p}:{n}", len(line), caps)
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p} line {n} is not JSON: {e}") from None
            rows.append(_object_row(row, f"{p}:{n}"))
            numbers.append(n)
        _label(labels, "line", numbers)
        return rows
    raise ValueError(f"{p}: unsupported file type {p.suffix!r}; use .parquet or .jsonl")


def _is_null(v: Any, na: Any) -> bool:
    return v is na or (isinstance(v, float) and v != v)


def _label(labels: list[str] | None, word: str, numbers: Iterable[int]) -> None:
    if labels is not None:
        labels.extend(f"{word} {n}" for n in numbers)


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
    row in messages (`<file> line 3`; default `<source> index <i>`)."""
    where = where or f"{source} index {i}"
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
    q = next((row[k] for k in _Q if row.get(k) is not None), None)
    a = next((row[k] for k in _A if row.get(k) is not None), None)
    if q is None or (a is None and not any(k in row for k in _A)):
        named = [k for k in _Q if k in row]  # a question column whose value is null
        raise ValueError(
            f"{where}: its question ({named[0]}) is null; fill it in or drop the row"
            if q is None and named
            else f"{where}: needs a question ({'|'.join(_Q)}) and an answer ({'|'.join(_A)}) "
            f"or the verl columns prompt/reward_model; has {sorted(row)}"
        )
    if not allow_empty:  # an answer column whose value is null is an empty answer
        _no_empty_answer(a, where)
    a = "" if a is None else a
    c = next((row[k] for k in _C if k in row), None)
    if spec.kind == "mc":
        if c is not None:
            q = format_choices(str(q), _choices(c))
        gt = _mc_answer(a)
    else:
        gt = clean_answer(a)
    return Record(build_prompt(str(q), spec.name), gt, spec.kind, source, i, spec.name)


def load_file(path: str | Path, spec: DatasetSpec, caps: SizeCaps | None = None) -> list[Record]:
    labels: list[str] = []
    rows = read_rows(path, caps, labels=labels)
    if not rows:
        raise ValueError(f"{path} has no rows")
    return records_with_answers(enumerate(rows), spec, str(path), label=labels.__getitem__)


def records_with_answers(
    rows: Iterable[tuple[int, dict[str, Any]]],
    spec: DatasetSpec,
    source: str,
    label: Callable[[int], str] | None = None,
) -> list[Record]:
    """Records of (index, row) pairs. Rows with an empty answer are kept as published and
    counted in one line on stderr (the authors' math75 has 2 of 7500: every response to them
    scores 0); a file of nothing else is refused. `label(index)` names a row in messages
    (`read_rows`'s labels; default `index <i>`, a hub dataset's own 0-based index)."""
    label = label or (lambda i: f"index {i}")
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
