# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron eval compare`: side-by-side scores of finished eval outputs.

Apart from `eval/run.py` because it is its own command with its own parser: it only reads
results.json files (and the paper's rows) and never loads a model, a dataset or a grader.
"""

from __future__ import annotations

import json
from pathlib import Path

from clipo_megatron.cli_args import make_parser, user_error

PROG = "clipo-megatron eval compare"


def _compared_runs(args, is_reference, load_reference) -> dict[str, dict]:
    """{name: scores} of every compared output, in the order given (the first is the deltas'
    baseline); ValueError naming a missing or unreadable results.json."""
    outputs = [r for r in args.runs if not is_reference(r)]
    paths = {r: Path(r) / "results.json" if Path(r).is_dir() else Path(r) for r in outputs}
    for p in paths.values():
        if not p.is_file():
            raise FileNotFoundError(f"{p} does not exist: pass `clipo-megatron eval` output dirs")
    names = args.names.split(",") if args.names else [p.parent.name for p in paths.values()]
    if len(names) != len(paths) or len(set(names)) != len(names):
        raise ValueError(f"--names {names} must give {len(paths)} distinct names")
    name_of = dict(zip(outputs, names))
    runs: dict[str, dict] = {}
    for arg in args.runs:
        if is_reference(arg):
            runs.update(load_reference(arg))
            continue
        runs[name_of[arg]] = read_scores(paths[arg])
    return runs


def read_scores(path: Path) -> dict[str, float]:
    """{dataset or average: score} of a `clipo-megatron eval` results.json; ValueError naming
    the file when it is not one."""
    try:
        r = json.loads(path.read_text(encoding="utf-8"))
        return {**r["scores"], **r["averages"]}
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{path}: not the results.json of `clipo-megatron eval` ({type(e).__name__}: "
            f"{str(e)[:80]})"
        ) from None


def run_compare(argv: list[str]) -> int:
    from clipo_megatron.eval.aggregate import compare
    from clipo_megatron.eval.reference import is_reference, load_reference
    from clipo_megatron.eval.report import bar_chart, markdown_table
    from clipo_megatron.output_folder import claim_output_folder

    ap = make_parser(
        PROG,
        "side-by-side scores of two or more eval outputs, with deltas vs the first",
    )
    ap.add_argument(
        "runs",
        nargs="+",
        help="eval output dirs (results.json), results.json files, or rows of the paper's "
        "tables: examples/configs/reproduce/paper_scores.json#table1[/GRPO+CLIPO]",
    )
    ap.add_argument(
        "--names", help="comma-separated names of the eval outputs (default: dir names)"
    )
    ap.add_argument("--out", default="runs/eval/compare")
    args = ap.parse_args(argv)
    try:  # one line for a missing or broken input; --out untouched until they are read
        runs = _compared_runs(args, is_reference, load_reference)
        out = claim_output_folder(args.out, kind="eval-compare", key="--out")
    except (ValueError, FileNotFoundError, OSError) as e:
        user_error(PROG, str(e))
    cmp = compare(runs)
    md = markdown_table(cmp)
    (out / "compare.json").write_text(json.dumps(cmp, indent=2))
    (out / "compare.md").write_text(md)
    bar_chart(runs, out / "compare.png")
    print(md)
    print(f"wrote {out}/compare.json, compare.md, compare.png")
    return 0
