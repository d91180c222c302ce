# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron` command line: `train`, `compare` and `eval`.

Each subcommand lives in its own module exposing `main(argv) -> int`; they are
imported lazily so `clipo-megatron eval --help` does not pay for Megatron.
"""

from __future__ import annotations

import importlib
import sys

_SUBCOMMANDS = {
    "train": (
        "clipo_megatron.runner.train",
        "GRPO / DAPO / GSPO / GMPO, with or without CLIPO, on one machine (YAML + dotted overrides)",
    ),
    "compare": (
        "clipo_megatron.runner.compare",
        "objectives x {CLIPO, baseline} x seeds: one table with 95 % intervals, plots (resumable)",
    ),
    "eval": (
        "clipo_megatron.eval.run",
        "pass@1 over a benchmark suite or datasets; --run DIR / --config: a training run's held-out task",
    ),
}
# `eval --run DIR` / `eval --config` evaluate the runner's own task with the runner's `Run`:
# routed here, above both packages, so that eval never imports the runner.
_RUNNER_HELDOUT = "clipo_megatron.runner.heldout"


def _module_for(argv: list[str]) -> str:
    if argv[0] == "eval":
        rest = set(argv[1:])
        if rest & {"--run", "--config"} and not rest & {"--suite", "--datasets", "compare"}:
            return _RUNNER_HELDOUT
    return _SUBCOMMANDS[argv[0]][0]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in _SUBCOMMANDS:
        lines = [f"usage: clipo-megatron {{{','.join(_SUBCOMMANDS)}}} [args]", ""]
        lines += [f"  {name:8s} {desc}" for name, (_, desc) in _SUBCOMMANDS.items()]
        print("\n".join(lines))
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown subcommand {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    module = importlib.import_module(_module_for(argv))
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
