# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`scripts/mutation_check.py` breaks CLIPO by exact string replacement: each mutation's line must
occur once in today's tree, or the check stops at that mutation when someone runs it (a refactor
that reformats or moves the line shows here, in CI, instead). The mutated file must still parse,
so a red contract test means CLIPO broke, not the file."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mutations():
    spec = importlib.util.spec_from_file_location(
        "mutation_check", ROOT / "scripts/mutation_check.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_check"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module.MUTATIONS


@pytest.mark.parametrize("mutation", _mutations(), ids=lambda m: m.name)
def test_each_mutation_matches_once_and_the_mutant_parses(mutation):
    text = (ROOT / mutation.path).read_text()
    assert text.count(mutation.old) == 1, f"{mutation.name}: update scripts/mutation_check.py"
    mutant = text.replace(mutation.old, mutation.new)
    assert mutant != text
    ast.parse(mutant)
