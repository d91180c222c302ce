# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Config validation has one module per block, and each rule one home: a known rule's error text,
or a table of key ranges, found in a second module fails here (a copy drifts from its original).

The homes: `core/config.py` (the `clipo:` block), `nemo_rl/config.py` (NeMo-RL's integration
keys; `env.clipo_math`, the environment actor's settings, in `nemo_rl/env_grading.py`),
`runner/config.py` (the runner's), and `core/bounds.py` for the rules the three share.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "clipo_megatron"

CLIPO = "core/config.py"
NEMO_RL = "nemo_rl/config.py"
RUNNER = "runner/config.py"
SHARED = "core/bounds.py"
ENV = "nemo_rl/env_grading.py"  # `env.clipo_math`: the settings the environment actor reads

# A fragment of each rule's error text, as the source spells it -> the one module that may state
# it; the others call that module.
RULES: dict[str, str] = {
    # the `clipo:` block
    "is not one of {sorted(GRADERS)}": CLIPO,
    "{METHOD_KEY}.{name}={value!r} is not one of {choices}": CLIPO,
    "must be a bool (true or false)": CLIPO,
    "needs anchors='all' or 'incorrect'": CLIPO,
    "is not a method key": CLIPO,
    "correct_reward_threshold={t!r} must be a finite number": CLIPO,
    "must be true, false or null": CLIPO,
    "a CLIPO group needs >= 2 correct": CLIPO,
    "policy would never be updated": CLIPO,
    "std of near-equal peers": CLIPO,
    "a method knob, under clipo.method": CLIPO,
    # the rules every block shares: a switch, a range
    "must be true or false": SHARED,
    "must be {self.text()}": SHARED,
    # NeMo-RL's integration keys
    "must be a plain directory name": NEMO_RL,
    "wraps the 'grpo' estimator only": NEMO_RL,
    "multiple of policy.train_global_batch_size": NEMO_RL,
    "this integration runs on NeMo-RL's Megatron": NEMO_RL,
    "NeMo-RL shards CP only on packed sequences": NEMO_RL,
    "pipeline_model_parallel_size={pp} is incompatible with": NEMO_RL,
    "pick a multiple of TP or set clipo.head_tensor_parallel=false": NEMO_RL,
    "grader is one key": NEMO_RL,
    "makes NeMo-RL skip the prev-logprob pass": NEMO_RL,
    "a replayed CUDA graph runs no Python": NEMO_RL,
    "filters groups by dynamic sampling": NEMO_RL,
    "uses an asymmetric clip": NEMO_RL,
    # NeMo-RL's `env.clipo_math` (the grader's rule is the `clipo:` block's, called there)
    "env.clipo_math.num_workers=": ENV,
    "env.clipo_math.timeout=": ENV,
    "env.clipo_math.max_answer_chars=": ENV,
    # the runner's
    "must be 'smollm2' or 'tiny'": RUNNER,
    "the in-process vLLM engine": RUNNER,
    "the perturbed set perturbs the generated basic_arithmetic": RUNNER,
    "processes were launched": RUNNER,
    "must be a multiple of 8": RUNNER,
    "must be one of {KL_GRADIENTS} (or null)": RUNNER,
}

# A table of config keys to their `Range`s ({"grpo.num_...": Range(...)}) is a block's ranges.
RANGE_TABLES = {"METHOD_RANGES": CLIPO, "NEMO_RL_RANGES": NEMO_RL, "RANGES": RUNNER}


def _is_range(value: ast.expr | None) -> bool:
    """`Range(...)` or a shared one, `bounds.TOP_P`."""
    if isinstance(value, ast.Call):
        return getattr(value.func, "id", "") == "Range"
    return isinstance(value, ast.Attribute) and getattr(value.value, "id", "") == "bounds"


def _range_tables(tree: ast.AST) -> list[str]:
    """Names bound to a dict literal whose keys are dotted config keys or knobs, values `Range`s."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
            d = node.value
            rules = [v for v in d.values if _is_range(v)]
            if d.keys and len(rules) >= 2:
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                found.append(getattr(target, "id", "?"))
    return found


def homes_of(root: Path = PACKAGE) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(rule fragment -> modules stating it, range table -> modules defining one)."""
    texts: dict[str, set[str]] = {fragment: set() for fragment in RULES}
    tables: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        source = path.read_text(encoding="utf-8")
        for fragment in RULES:
            if fragment in source:
                texts[fragment].add(module)
        tree = ast.parse(source)
        for name in _range_tables(tree):
            tables.setdefault(name, set()).add(module)
    return texts, tables


def test_each_rule_is_stated_in_its_home_only():
    texts, _ = homes_of()
    wrong = {
        fragment: sorted(modules)
        for fragment, modules in texts.items()
        if modules != {RULES[fragment]}
    }
    assert not wrong, f"a rule stated outside its home (or nowhere): {wrong}"


def test_each_block_has_one_range_table_in_its_home():
    _, tables = homes_of()
    assert tables == {name: {home} for name, home in RANGE_TABLES.items()}


def test_the_homes_import_downwards_only():
    """core's home imports neither NeMo-RL's nor the runner's; those two not each other."""
    for home, banned in (
        (CLIPO, ("clipo_megatron.nemo_rl", "clipo_megatron.runner")),
        (SHARED, ("clipo_megatron.nemo_rl", "clipo_megatron.runner")),
        (NEMO_RL, ("clipo_megatron.runner",)),
        (RUNNER, ("clipo_megatron.nemo_rl",)),
    ):
        tree = ast.parse((PACKAGE / home).read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not [m for m in imported if m.startswith(banned)], home


@pytest.mark.parametrize(
    ("module", "source"),
    [
        # the grader rule restated where env.clipo_math is read
        ("nemo_rl/env_grading.py", 'X = f"{key}={g!r} is not one of {sorted(GRADERS)}"\n'),
        # the launch rule restated in the runner's process-group setup
        ("runner/parallel.py", 'X = f"{a} but {b} processes were launched"\n'),
        # a second table of NeMo-RL key ranges, new ones or the shared ones
        ("nemo_rl/recipe_keys.py", 'T = {"a.b": Range(1), "a.c": Range(2)}\n'),
        ("nemo_rl/guard/preflight.py", 'T = {"a.b": bounds.TOP_P, "a.c": bounds.KL_COEF}\n'),
    ],
)
def test_the_check_sees_a_second_home(tmp_path, module, source):
    """A copy of the package with one rule (or range table) added outside its home: red."""
    import shutil

    root = tmp_path / "clipo_megatron"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / module
    target.write_text(target.read_text(encoding="utf-8") + "\n" + source, encoding="utf-8")
    texts, tables = homes_of(root)
    seconds = {f: m for f, m in texts.items() if m != {RULES[f]}}
    seconds.update({t: m for t, m in tables.items() if m != {RANGE_TABLES.get(t)}})
    assert seconds and all(module in m for m in seconds.values())
