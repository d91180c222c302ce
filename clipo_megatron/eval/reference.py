# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper's printed numbers as rows `eval compare` can set beside a run.

`examples/configs/reproduce/paper_scores.json` holds every experiment table of the paper
(`python -m clipo_megatron.paper tables` lists them), each row keyed by this project's dataset
names and averages, as `clipo-megatron eval` writes them. A compare argument
`FILE#TABLE/ROW` is one row, `FILE#TABLE` every row of the table:

    clipo-megatron eval compare examples/configs/reproduce/paper_scores.json#table1/GRPO+CLIPO \\
        runs/eval/track1_grpo_clipo
"""

from __future__ import annotations

import json
from pathlib import Path

from clipo_megatron.paper.scores import PAPER_SCORES

__all__ = ["PAPER_SCORES", "is_reference", "load_reference"]


def is_reference(arg: str) -> bool:
    """`FILE.json#TABLE[/ROW]`: a row (or table) of a reference file, not an eval output."""
    return "#" in arg and arg.split("#", 1)[0].endswith(".json")


def load_reference(arg: str) -> dict[str, dict[str, float]]:
    """{"paper:<table>/<row>": {column: score}} for `FILE#TABLE[/ROW]`; a missing file,
    table or row is one ValueError naming what exists."""
    path_s, sel = arg.split("#", 1)
    path = Path(path_s)
    if not path.is_file():
        raise ValueError(f"{arg}: reference file {path} does not exist")
    tables = json.loads(path.read_text()).get("tables")
    if not isinstance(tables, dict):
        raise ValueError(f"{arg}: {path} has no 'tables' (a paper_scores.json-style file)")
    table, _, row = sel.partition("/")
    if table not in tables:
        raise ValueError(f"{arg}: no table {table!r} in {path}; tables: {sorted(tables)}")
    rows = tables[table]["rows"]
    names = [row] if row else list(rows)
    missing = [r for r in names if r not in rows]
    if missing:
        raise ValueError(f"{arg}: no row {missing[0]!r} in {table}; rows: {list(rows)}")
    cols = tables[table]["columns"]
    # a row prints the table's columns it has (Table 3: G-Avg on Track I, C-Avg on Track II)
    return {f"paper:{table}/{r}": {c: rows[r][c] for c in cols if c in rows[r]} for r in names}
