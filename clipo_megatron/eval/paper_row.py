# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron eval paper TABLE/ROW RUN [RUN ...]`: finished runs beside the paper's row.

Each RUN is a `clipo-megatron eval` output (its results.json) of one training run of the row's
recipe, one per seed. Per column: the paper's number, each run's, their mean, mean - paper and
the run-to-run spread (the sample standard deviation over the runs; unknown with one run, and
the paper reports one run per row, so its own spread is unknown too). Reads only results.json
files and paper_scores.json, as `eval compare`:

    clipo-megatron eval paper table1/GRPO+CLIPO runs/eval/t1_seed1 runs/eval/t1_seed2 \\
        --out runs/eval/paper_table1_grpo_clipo
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from clipo_megatron.cli_args import make_parser, user_error

PROG = "clipo-megatron eval paper"


def beside_the_paper(paper: dict[str, float], runs: dict[str, dict[str, float]]) -> dict:
    """{"columns", "paper", "runs", "mean", "difference", "spread", "n"}: per column of the
    paper's row, over the runs that have it (None where none has; spread None below two)."""
    cols = list(paper)
    have = {c: [r[c] for r in runs.values() if r.get(c) is not None] for c in cols}
    mean: dict[str, float | None] = {c: statistics.fmean(v) if v else None for c, v in have.items()}
    diff = {c: None if m is None else m - paper[c] for c, m in mean.items()}
    return {
        "columns": cols,
        "paper": paper,
        "runs": {name: {c: r.get(c) for c in cols} for name, r in runs.items()},
        "mean": mean,
        "difference": diff,
        "spread": {c: statistics.stdev(v) if len(v) > 1 else None for c, v in have.items()},
        "n": {c: len(v) for c, v in have.items()},
    }


def _fmt(x: float | None, signed: bool = False) -> str:
    return "-" if x is None else f"{x:+.2f}" if signed else f"{x:.2f}"


def markdown(row: str, cmp: dict) -> str:
    from clipo_megatron.eval.report import label

    names = list(cmp["runs"])
    head = ["column", f"paper ({row})", *names, "mean", "mean - paper", "spread (sd)", "n"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for c in cmp["columns"]:
        cells = [label(c), _fmt(cmp["paper"][c])]
        cells += [_fmt(cmp["runs"][n][c]) for n in names]
        cells += [_fmt(cmp["mean"][c]), _fmt(cmp["difference"][c], True)]
        cells += [_fmt(cmp["spread"][c]), str(cmp["n"][c])]
        lines.append("| " + " | ".join(cells) + " |")
    note = (
        "spread: the sample standard deviation over the runs (seeds); unknown ('-') with one run."
    )
    return "\n".join(lines) + f"\n\n{note}\n"


def run_paper(argv: list[str]) -> int:
    from clipo_megatron.eval.compare_runs import read_scores
    from clipo_megatron.eval.reference import PAPER_SCORES, load_reference
    from clipo_megatron.output_folder import claim_output_folder

    ap = make_parser(PROG, "finished runs' evaluations beside the paper's row, with their spread")
    ap.add_argument("row", help="TABLE/ROW of paper_scores.json, e.g. table1/GRPO+CLIPO")
    ap.add_argument("runs", nargs="+", help="eval output dirs (results.json), one per seed")
    ap.add_argument("--names", help="comma-separated names of the runs (default: dir names)")
    ap.add_argument("--scores", default=str(PAPER_SCORES), help="the paper's tables (json)")
    ap.add_argument("--out", default="runs/eval/paper")
    args = ap.parse_args(argv)
    try:  # one line for a missing or broken input; --out untouched until they are read
        if "/" not in args.row:
            raise ValueError(f"{args.row}: give TABLE/ROW, e.g. table1/GRPO+CLIPO")
        (paper,) = load_reference(f"{args.scores}#{args.row}").values()
        paths = [Path(r) / "results.json" if Path(r).is_dir() else Path(r) for r in args.runs]
        names = args.names.split(",") if args.names else [p.parent.name for p in paths]
        if len(names) != len(paths) or len(set(names)) != len(names):
            raise ValueError(f"--names {names} must give {len(paths)} distinct names")
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ValueError(f"{missing[0]} does not exist: pass `clipo-megatron eval` output dirs")
        runs = {n: read_scores(p) for n, p in zip(names, paths)}
        out = claim_output_folder(args.out, kind="eval-paper", key="--out")
    except (ValueError, OSError) as e:
        user_error(PROG, str(e))
    cmp = {"row": args.row, **beside_the_paper(paper, runs)}
    md = markdown(args.row, cmp)
    (out / "paper.json").write_text(json.dumps(cmp, indent=2))
    (out / "paper.md").write_text(md)
    print(md)
    print(f"wrote {out}/paper.json, paper.md")
    return 0
