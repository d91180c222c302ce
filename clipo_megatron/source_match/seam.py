# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A seam: one thing this project relies on in code it does not own, and the check that reads
it in that code's source. `moved_seams` runs checks and says, per moved seam, where it was
expected and what is there instead; the caller words the line (and the fix) for its readers."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from clipo_megatron.source_match.source import (
    Absent,
    Source,
    ast_params,
    called_names,
    calls,
    live_params,
    opaque,
    render,
    signature_gap,
)


@dataclass(frozen=True)
class Seam:
    name: str
    rel: str  # file under the package's root
    symbol: str
    expect: str  # what the project relies on, in words
    fix: str  # where in this project the code adapts to a move
    check: Callable[[Source], str | None] = field(repr=False)  # None: in place; else found


def method_seam(name: str, rel: str, cls: str, meth: str, fix: str, *, positional=(),
                keywords=(), var_kw=False, complete=True, package: str = "nemo_rl") -> Seam:  # fmt: skip
    """`cls.meth` binds the call the project makes (`complete=False`: it also passes its
    caller's arguments through); checked in the source, and live where `package`'s module is
    imported."""
    shown = [*positional, *(f"{k}=" for k in keywords), *(["**kw"] if var_kw else [])]
    shown += [] if complete or var_kw else ["..."]

    def check(src: Source) -> str | None:
        params = ast_params(src.method(rel, cls, meth))[1:]  # without self
        gap = signature_gap(params, positional, keywords, var_kw, complete)
        module = sys.modules.get(f"{package}." + rel[:-3].replace("/", "."))
        live = getattr(getattr(module, cls, None), meth, None) if module else None
        live_ps = live_params(live) if gap is None and callable(live) else []
        if gap is None and live_ps and not opaque(live_ps):
            params = live_ps[1:]
            gap = signature_gap(params, positional, keywords, var_kw, complete)
            gap = gap and f"the imported {cls}.{meth} differs from its source: {gap}"
        return gap and f"{meth}{render(params)}: {gap}"

    return Seam(name, rel, f"{cls}.{meth}", f"{meth}({', '.join(shown)})", fix, check)


def rebindable(src: Source, rel: str, fn: ast.FunctionDef, name: str, *words: str) -> str | None:
    """None when `fn` calls the module-level `name` of `rel` by that name (so rebinding the
    module attribute reaches the call), else what is missing and what `fn` calls instead."""
    bound, called = name in src.bindings(rel), bool(calls(fn, name))
    if bound and called:
        return None
    gaps = ([] if bound else [f"no module-level {name}"]) + (
        [] if called else [f"{fn.name} does not call {name}"]
    )
    instead = ", ".join(n for n in called_names(fn, *words) if n != name) or "nothing like it"
    return f"{' and '.join(gaps)}; {fn.name} calls {instead}"


def moved_seams(seams: Iterable[Seam], src: Source) -> list[tuple[Seam, str, str, str]]:
    """(seam, what was expected, where under the root, what was found) for each moved seam. A missing file
    or symbol is named once, by the first seam that needs it; a check that cannot read the
    source names its seam instead of raising."""
    moved, seen = [], set()
    for seam in seams:
        try:
            found = seam.check(src)
        except Absent as e:
            if (e.rel, e.symbol) not in seen:
                seen.add((e.rel, e.symbol))
                near = f" (similar: {', '.join(e.near)})" if e.near else ""
                what, found = (
                    (e.symbol, f"no {e.symbol}{near}") if e.symbol else ("the file", "none")
                )
                moved.append((seam, what, e.rel, found))
            continue
        except SyntaxError as e:
            found = f"unparseable source ({e.msg}, line {e.lineno}; NeMo-RL needs Python >= 3.12)"
        except Exception as e:  # name the seam; never crash the caller's preflight
            found = f"unreadable source ({type(e).__name__}: {e})"
        if found is not None:
            moved.append((seam, seam.expect, f"{seam.rel} ({seam.symbol})", found))
    return moved
