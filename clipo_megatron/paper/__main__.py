# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`python -m clipo_megatron.paper {tables,recipes,array}`.

python -m clipo_megatron.paper tables            # the tables and their row counts
python -m clipo_megatron.paper recipes           # (re)write the generated recipes
python -m clipo_megatron.paper recipes --check   # exit 1 if they differ from paper_scores.json
python -m clipo_megatron.paper array table1      # the job array's tasks (slurm/paper_table.sh)
"""

from __future__ import annotations

import argparse
import sys

from clipo_megatron.paper.layout import array_lines
from clipo_megatron.paper.recipes import REPRODUCE, stale_recipes, write_recipes
from clipo_megatron.paper.scores import PAPER_SCORES, tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m clipo_megatron.paper", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("tables", help="the paper's tables and their row counts")
    rec = sub.add_parser("recipes", help="write the generated recipes (--check: compare only)")
    rec.add_argument("--check", action="store_true")
    arr = sub.add_parser("array", help="one line per task of TABLE's job array")
    arr.add_argument("table")
    arr.add_argument("--seeds", default="", help="e.g. '1 2 3': each row once per grpo.seed")
    args = ap.parse_args(argv)
    if args.cmd == "tables":
        for key, tab in tables().items():
            print(f"{key}\t{len(tab['rows'])} rows\t{tab['section']}: {tab['caption']}")
        return 0
    if args.cmd == "recipes":
        changed = stale_recipes() if args.check else write_recipes()
        for name in changed:
            print(f"{'differs' if args.check else 'wrote'}: {REPRODUCE.name}/{name}")
        if args.check and changed:
            print("run `python -m clipo_megatron.paper recipes` to regenerate", file=sys.stderr)
            return 1
        return 0
    try:
        seeds = tuple(int(x) for x in args.seeds.replace(",", " ").split())
        print("\n".join(array_lines(args.table, PAPER_SCORES.parents[3], seeds)))
    except ValueError as e:
        print(f"python -m clipo_megatron.paper array: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
