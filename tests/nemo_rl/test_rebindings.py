# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The NeMo-RL names CLIPO rebinds (`rebinding.REBINDINGS`, `transfer_queue.TQ_REBINDINGS`): each is
restored when its `with` closes, also on an exception; the list names every rebinding in the
product (a `setattr` outside a listed binder turns this red); `--seams` prints it per loop."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.port import grpo_loop, rebinding, transfer_queue
from clipo_megatron.nemo_rl.port.loops import SUPPORTED
from clipo_megatron.nemo_rl.port.seams import seam_list

ROOT = Path(__file__).resolve().parents[2]
ALL = (*rebinding.REBINDINGS, *transfer_queue.TQ_REBINDINGS)


def _binders() -> set[str]:
    return {r.binder.split(" (")[0] for r in ALL}


def _bind(binder: str, module: types.ModuleType):
    if binder == "advantage_estimator_installed":
        return rebinding.advantage_estimator_installed(module, lambda base: ("wrapped", base))
    pooler = types.SimpleNamespace(tee=lambda it: ("teed", it))
    return rebinding.microbatches_teed(module, pooler)


@pytest.mark.parametrize("rebinding", ALL, ids=lambda r: f"{r.module}.{r.name}")
@pytest.mark.parametrize("raises", [False, True], ids=["exit", "exception"])
def test_each_rebinding_is_bound_inside_and_restored_after(rebinding, raises):
    def original(*args):
        return ("it", "meta")

    module = types.ModuleType(rebinding.module)
    setattr(module, rebinding.name, original)
    with pytest.raises(KeyError) if raises else _nothing():
        with _bind(rebinding.binder.split(" (")[0], module):
            assert getattr(module, rebinding.name) is not original
            if raises:
                raise KeyError("a step failed")
    assert getattr(module, rebinding.name) is original


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_list_names_every_rebinding_in_the_product():
    """Every `setattr(x, ...)` with x not `self` in clipo_megatron/nemo_rl/ sits in a listed
    binder; and each listed binder is a function here that sets the attribute and restores it."""
    outside, binders = [], _binders()
    for path in sorted((ROOT / "clipo_megatron" / "nemo_rl").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for call in ast.walk(fn):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == "setattr"
                    and ast.unparse(call.args[0]) not in ("self", "cls")
                    and fn.name not in binders
                ):
                    outside.append(f"{path.relative_to(ROOT)}:{call.lineno} in {fn.name}")
    assert not outside, f"rebindings not in rebinding.REBINDINGS: {outside}"
    for name in binders:
        assert callable(getattr(rebinding, name, None)), f"{name} is not in port/rebinding.py"


def test_rebindings_point_at_the_seams_that_guard_them():
    seams = {(s.rel, s.symbol.split(",")[0]) for s in (*grpo_loop.SEAMS, *transfer_queue.TQ_SEAMS)}
    for r in rebinding.REBINDINGS:
        assert (r.rel, r.name) in seams, f"no seam guards {r.module}.{r.name}"
    for r in transfer_queue.TQ_REBINDINGS:  # grpo_sync's copy: guarded by the sync loop's seam
        assert r.rel == transfer_queue.GRPO_SYNC and r.name == rebinding.ESTIMATOR


@pytest.mark.parametrize("loop", SUPPORTED, ids=lambda loop: loop.name)
def test_seam_list_names_the_loops_rebindings(loop):
    lines = seam_list(loop)
    bound = [r for r in ALL if loop.name in r.loops]
    assert bound and f"CLIPO rebinds {len(bound)} NeMo-RL names for {loop.name}" in lines[0]
    for r in bound:
        assert any(line.strip().startswith(f"{r.module}.{r.name}: by {r.binder}") for line in lines)
    estimator_home = "grpo_sync" if loop.name == "grpo_train_sync" else "grpo"
    assert any(
        f"nemo_rl.algorithms.{estimator_home}._create_advantage_estimator" in x for x in lines
    )
