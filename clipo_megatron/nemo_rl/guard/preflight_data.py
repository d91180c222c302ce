# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Preflight: the `data:` sections as NeMo-RL's `setup_response_data` will read them.

Two silent or late failures are caught here, reading only file schemas and one column:

* a dataset class that reads columns the file lacks (NeMo-RL's `ResponseDataset` rebuilds each
  row from `input_key` / `output_key`, default `input` / `output`, and drops every other column,
  so the authors' verl parquet, keyed `prompt` / `reward_model`, raises KeyError 'input' after
  the cluster is up);
* training rows that are also validation rows: the same file (or the same prompts) in both
  sections evaluates on training data. (`split_validation_size > 0` next to a validation file is
  NeMo-RL's choice, a warning: `split_beside_validation`.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FILE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".arrow", ".txt")


def entries(data: dict[str, Any], section: str) -> list[tuple[str, dict[str, Any]]]:
    """[(label, entry filled from data.default)] as `update_single_dataset_config` fills them."""
    node = data.get(section)
    if node is None:
        return []
    items = node if isinstance(node, list) else [node]
    default = data.get("default") or {}
    out = []
    for i, item in enumerate(items):
        filled = {**default, **(item or {})}
        out.append((f"data.{section}" + (f"[{i}]" if isinstance(node, list) else ""), filled))
    return out


def read_columns(path: Path) -> list[str]:
    """Column names from a file's schema / first record (the rows are not read)."""
    suffix = path.suffix
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    # utf-8-sig: a Windows editor's BOM is not part of the first column (NeMo-RL's reader skips it)
    if suffix == ".jsonl":
        with path.open(encoding="utf-8-sig") as f:
            return list(json.loads(f.readline() or "{}"))
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        return list((data[0] if isinstance(data, list) and data else data) or {})
    if suffix == ".csv":
        with path.open(encoding="utf-8-sig") as f:
            return [c.strip() for c in f.readline().strip().split(",")]
    raise ValueError(f"cannot read columns of a {suffix} file")


def columns_read(entry: dict[str, Any]) -> list[str] | None:
    """Columns the configured dataset class reads; None when this preflight does not know it."""
    if entry.get("dataset_name", "ResponseDataset") == "ResponseDataset":
        return [entry.get("input_key", "input"), entry.get("output_key", "output")]
    return None


def local_file(entry: dict[str, Any]) -> Path | None:
    p = entry.get("data_path")
    return Path(str(p)).expanduser() if p and str(p).endswith(FILE_SUFFIXES) else None


def check_files(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Each data entry's file exists and has the columns its dataset class reads."""
    problems: list[str] = []
    warnings: list[str] = []
    for section in ("train", "validation"):
        for label, entry in entries(data, section):
            path = local_file(entry)
            name = entry.get("dataset_name", "ResponseDataset")
            if path is None:
                if entry.get("data_path"):
                    warnings.append(
                        f"{label}.data_path={entry['data_path']!r} is not a local file; "
                        "NeMo-RL will load it from the HF hub (columns not checked)"
                    )
                continue
            if not path.is_file():
                hint = " (set CLIPO_DATA_DIR)" if "CLIPO_DATA_DIR" not in os.environ else ""
                problems.append(
                    f"{label}.data_path={str(path)!r} does not exist{hint}; point it at the "
                    "parquet file"
                )
                continue
            needed = columns_read(entry)
            if needed is None:
                warnings.append(f"{label}.dataset_name={name}: columns not checked")
                continue
            try:
                have = read_columns(path)
            except Exception as e:  # unreadable file: report, never a traceback
                problems.append(f"{label}.data_path={str(path)!r} cannot be read: {e}")
                continue
            if "messages" in have:  # ResponseDataset keeps a `messages` column as is
                continue
            missing = [c for c in needed if c not in have]
            if missing:
                problems.append(
                    f"{label}: {name} reads columns {needed} (input_key / output_key) but "
                    f"{path.name} has {have}; set {label}.input_key / output_key (or "
                    f"data.default.*) to its columns, e.g. prompt / reward_model"
                )
    return problems, warnings


def _row_keys(path: Path, column: str) -> set[str]:
    import pyarrow.parquet as pq

    if path.suffix != ".parquet":
        return set()
    col = pq.read_table(path, columns=[column]).column(0).to_pylist()
    return {json.dumps(v, sort_keys=True, default=str) for v in col}


def split_beside_validation(data: dict[str, Any]) -> list[str]:
    """A warning per training entry that splits off validation rows next to `data.validation`.

    NeMo-RL does this on purpose (`setup_response_data` validates on the split-off rows and on
    the validation sets, and never trains on the split-off rows), so it is no error; CLIPO's own
    recipes validate on the held-out files alone, so the validation curve means one thing."""
    val = entries(data, "validation")
    warnings = []
    for label, entry in entries(data, "train"):
        split = entry.get("split_validation_size", 0)
        if val and split is not None and float(split) > 0:
            warnings.append(
                f"{label}.split_validation_size={split}: NeMo-RL validates on that share of the "
                f"training rows as well as on {val[0][0]} (not trained on); set "
                f"{label}.split_validation_size=0 to validate on the held-out sets alone"
            )
    return warnings


def check_overlap(data: dict[str, Any]) -> list[str]:
    """No training row may also be a validation row."""
    problems: list[str] = []
    train = entries(data, "train")
    val = entries(data, "validation")
    for label, entry in train:
        split = entry.get("split_validation_size", 0)
        if split is None:
            problems.append(
                f"{label}.split_validation_size is null; NeMo-RL's ResponseDataset compares it "
                "with 0 (TypeError); set it to 0"
            )
    for tl, te in train:
        tp = local_file(te)
        for vl, ve in val:
            vp = local_file(ve)
            if tp is None or vp is None or not (tp.is_file() and vp.is_file()):
                continue
            if tp.resolve() == vp.resolve():
                problems.append(
                    f"{vl}.data_path is the training file {tp}; validate on a held-out file"
                )
                continue
            key = te.get("input_key", "input")
            if key != ve.get("input_key", "input"):
                continue
            try:
                shared = _row_keys(tp, key) & _row_keys(vp, key)
            except Exception:  # column problems are reported by check_files
                continue
            if shared:
                problems.append(
                    f"{vl}: {len(shared)} rows of {vp.name} have the same `{key}` as rows of "
                    f"{tl} ({tp.name}); remove them from one of the files"
                )
    return problems
