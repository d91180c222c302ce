# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Where this integration meets NeMo-RL's code, checked in NeMo-RL's source before a run.

A commit check (`compat`) can only refuse a NeMo-RL it does not know; these checks say *what*
moved. Each `Seam` is one thing the project relies on: a class it subclasses, a method it
overrides and the arguments it passes, a module-level name it rebinds and the call NeMo-RL makes
by that name. The table for a loop is `seams_of(loop)`: the worker, policy and loss seams
(`seam_checks.SEAMS`), the rebindings' and `grpo_train`'s (`grpo_loop.SEAMS`), every
`from nemo_rl... import name` of the product modules (`seam_imports`; not the CPU stand-ins, not
imports guarded by `except ImportError`), and the loop's own (async, TransferQueue). `check`
returns one line per moved seam: which seam, where it was expected (file, symbol), what is there
instead, and the fix. The source is parsed, never imported: the worker module needs
Megatron-Bridge, absent on most login nodes.

    python -m clipo_megatron.nemo_rl.port.seams <NeMo-RL checkout or its nemo_rl/ directory>
"""

from __future__ import annotations

import sys
from pathlib import Path

from clipo_megatron.nemo_rl.port import grpo_loop, seam_checks, transfer_queue, versions
from clipo_megatron.nemo_rl.port.loops import ASYNC_GRPO_TRAIN, GRPO_TRAIN_SYNC, Loop
from clipo_megatron.nemo_rl.port.rebinding import REBINDINGS, Rebinding
from clipo_megatron.nemo_rl.port.seam_imports import import_seams
from clipo_megatron.source_match import Seam, Source, moved_seams

# The seams only a recipe of that loop depends on, checked besides the common ones.
_LOOP_SEAMS: dict[str, tuple[Seam, ...]] = {
    ASYNC_GRPO_TRAIN.name: grpo_loop.ASYNC_SEAMS,
    GRPO_TRAIN_SYNC.name: transfer_queue.TQ_SEAMS,
}


def common_seams() -> list[Seam]:
    """The seams every loop relies on: the worker, policy and loss, the rebindings and
    grpo_train's call, every NeMo-RL import."""
    return [*seam_checks.SEAMS, *grpo_loop.SEAMS, *import_seams()]


def seams_of(loop: str | None = None) -> tuple[Seam, ...]:
    """What the preflight reads before a run of `loop` (a loop's name; None: the common ones)."""
    return (*common_seams(), *_LOOP_SEAMS.get(loop or "", ()))


def loop_seams_of(loop: Loop) -> tuple[Seam, ...]:
    """The seams only a recipe of `loop` depends on (async_grpo_train's, grpo_train_sync's)."""
    return _LOOP_SEAMS.get(loop.name, ())


def rebindings_of(loop: str) -> tuple[Rebinding, ...]:
    """The NeMo-RL names CLIPO rebinds while `loop` (its name) runs."""
    return tuple(r for r in (*REBINDINGS, *transfer_queue.TQ_REBINDINGS) if loop in r.loops)


def seam_list(loop: Loop, version=None) -> list[str]:
    """What `run_grpo_clipo.py --seams` prints for a recipe of `loop`: each NeMo-RL name CLIPO
    rebinds, by what and for how long (restored when its `with` closes), then each seam the
    preflight reads in NeMo-RL's source before a run of that loop; `version`: a module of
    `versions/` (default: the newest)."""
    version = version or versions.newest()
    bound = version.rebindings(loop.name)
    seams = version.seams(loop.name)
    return [
        f"NeMo-RL {version.NAME} ({version.COMMIT[:9]}): CLIPO rebinds {len(bound)} NeMo-RL names "
        f"for {loop.name}, each restored when its `with` closes:",
        *(f"  {r.module}.{r.name}: by {r.binder}, {r.span}" for r in bound),
        f"and relies on {len(seams)} seams in NeMo-RL's source, checked before the run "
        "(fix paths under clipo_megatron/nemo_rl/):",
        *(f"  {s.name}: nemo_rl/{s.rel} {s.symbol}; fix: {s.fix}" for s in seams),
    ]


def _line(seam: Seam, expect: str, where: str, found: str) -> str:
    return (f"seam '{seam.name}' moved: expected {expect} in nemo_rl/{where}; found {found}; "
            f"fix (in clipo_megatron/nemo_rl/): {seam.fix}, or install a supported NeMo-RL "
            f"({', '.join(versions.names())}; docs/nemo_rl.md)")  # fmt: skip


def check(pkg_dir: str | Path, seams: tuple[Seam, ...] | None = None) -> list[str]:
    """One line per moved seam of the NeMo-RL package at `pkg_dir` (its nemo_rl/ directory);
    `seams`: the table to read (default: grpo_train's, `seams_of()`)."""
    table = seams_of() if seams is None else seams
    return [_line(*moved) for moved in moved_seams(list(table), Source(Path(pkg_dir)))]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m clipo_megatron.nemo_rl.port.seams <NeMo-RL checkout>",
            file=sys.stderr,
        )
        return 2
    given = Path(args[0])
    pkg = given / "nemo_rl" if (given / "nemo_rl").is_dir() else given
    if not given.is_dir():
        print(
            f"{given}: no such checkout; pass the folder NeMo-RL was cloned into", file=sys.stderr
        )
        return 2
    if not (pkg / "algorithms").is_dir():  # one line, not one "seam moved" line per seam
        print(
            f"{given} is not a NeMo-RL checkout (no nemo_rl/algorithms/ in it); pass the folder "
            "NeMo-RL was cloned into",
            file=sys.stderr,
        )
        return 2
    lines = check(pkg)
    print("\n".join(lines) if lines else f"all {len(seams_of())} NeMo-RL seams in place: {pkg}")
    return 2 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
