# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The house's drawing, from the package's imports (function-local ones included): no import
circle between modules, each package imports only the packages below it (CONTRIBUTING.md's map),
and no module reaches into another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "clipo_megatron"

# package -> the packages (or top-level modules) it may import; CONTRIBUTING.md, "The house".
ALLOWED: dict[str, set[str]] = {
    "grader_names": set(),
    "recipe_kind": set(),
    "cli_args": set(),
    "file_format": set(),
    "output_folder": {"file_format"},
    "core": {"file_format", "grader_names"},
    "verify": {"grader_names"},
    "models": set(),
    "data": {"verify"},
    "generation": {"models"},
    "reporting": set(),
    "megatron": {"core", "models"},
    "eval": {
        "cli_args",
        "core",
        "data",
        "generation",
        "models",
        "output_folder",
        "paper",
        "verify",
    },
    "paper": set(),
    "runner": {
        *("cli_args", "core", "data", "generation", "megatron", "models"),
        *("file_format", "output_folder", "reporting", "verify"),
    },
    "source_match": set(),
    "nemo_rl": {
        *("core", "data", "file_format", "megatron", "nemo_rl.port", "recipe_kind"),
        *("source_match", "verify"),
    },
    "nemo_rl.port": {"source_match"},  # everything CLIPO assumes about NeMo-RL, at the bottom
    "nemo_rl.guard": {
        "nemo_rl.port",
        "core",
        "data",
        "file_format",
        "megatron",
        "nemo_rl",
        "recipe_kind",
        "source_match",
        "verify",
    },
    "cli": {"recipe_kind", "runner", "eval", "nemo_rl", "cli_args"},
}


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def imports_of(root: Path = PACKAGE) -> dict[str, set[tuple[str, str]]]:
    """module -> {(imported module, imported name or "")}, every import in the module's code."""
    mods = _modules(root)
    edges: dict[str, set[tuple[str, str]]] = {m: set() for m in mods}
    for m, p in mods.items():
        tree = ast.parse(p.read_text())
        bound: dict[str, str] = {}  # local name -> the package module it is bound to
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == root.name:
                for a in n.names:
                    sub = f"{n.module}.{a.name}"
                    edges[m].add((sub, "") if sub in mods else (n.module, a.name))
                    if sub in mods:
                        bound[a.asname or a.name] = sub
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.split(".")[0] == root.name:
                        edges[m].add((a.name, ""))
                        if a.asname:
                            bound[a.asname] = a.name
        for n in ast.walk(tree):  # `module._name`: a private name reached through the module
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                if n.value.id in bound and n.attr.startswith("_") and not n.attr.startswith("__"):
                    edges[m].add((bound[n.value.id], n.attr))
    return {m: {(t, x) for t, x in e if t in mods and t != m} for m, e in edges.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                found.append(sorted([v, *comp]))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


ROOMS = ("nemo_rl.guard", "nemo_rl.port")  # a room inside a package: its own line on the map


def _package(module: str) -> str:
    inner = module.split(".", 1)[1] if "." in module else module
    return next((r for r in ROOMS if inner == r or inner.startswith(r + ".")), inner.split(".")[0])


def test_no_import_circle_between_modules():
    edges = {m: {t for t, _ in e} for m, e in imports_of().items()}
    assert circles(edges) == []


def test_each_package_imports_only_the_packages_below_it():
    upward = sorted(
        f"{m} -> {t}"
        for m, e in imports_of().items()
        for t, _ in e
        if _package(t) != _package(m) and _package(t) not in ALLOWED[_package(m)]
    )
    assert upward == []


def test_no_module_imports_another_modules_private_names():
    private = sorted(
        f"{m} imports {t}.{name}"
        for m, e in imports_of().items()
        for t, name in e
        if name.startswith("_")
    )
    assert private == []


def test_the_checks_see_a_circle_an_upward_import_and_a_private_name(tmp_path):
    """The checks above would go red: a tiny package with each fault."""
    pkg = tmp_path / "clipo_megatron"
    for sub in ("core", "runner"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("def f():\n    from clipo_megatron.core.b import g\n")
    (pkg / "core" / "b.py").write_text("from clipo_megatron.core import a\n")
    (pkg / "core" / "c.py").write_text("from clipo_megatron.runner.x import _hidden\n")
    (pkg / "core" / "d.py").write_text("from clipo_megatron.core import c as cc\ncc._peek()\n")
    (pkg / "runner" / "x.py").write_text("_hidden = 1\n")
    edges = imports_of(pkg)
    assert circles({m: {t for t, _ in e} for m, e in edges.items()}) == [
        ["clipo_megatron.core.a", "clipo_megatron.core.b"]
    ]
    assert ("clipo_megatron.runner.x", "_hidden") in edges["clipo_megatron.core.c"]
    assert ("clipo_megatron.core.c", "_peek") in edges["clipo_megatron.core.d"]
    assert "runner" not in ALLOWED["core"]
    # a room inside a package is its own line: the NeMo-RL integration may not import its guard
    assert _package("clipo_megatron.nemo_rl.guard.preflight") == "nemo_rl.guard"
    assert _package("clipo_megatron.nemo_rl.port.seams") == "nemo_rl.port"
    assert _package("clipo_megatron.nemo_rl.driver") == "nemo_rl"
    assert "nemo_rl.guard" not in ALLOWED["nemo_rl"]
    assert "nemo_rl" not in ALLOWED["nemo_rl.port"]  # the port knows NeMo-RL, not CLIPO's driver


@pytest.mark.parametrize("package", sorted({_package(m) for m in _modules()}))
def test_every_package_is_on_the_map(package):
    assert package in ALLOWED or package == "clipo_megatron", f"{package}: add it to ALLOWED"


def test_every_module_ships_in_the_package():
    """setuptools' `packages.find` (pyproject.toml) takes only folders with an `__init__.py`: a
    module in any other folder imports from a checkout but is missing from a wheel."""
    import tomllib

    from setuptools import find_packages

    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = set(find_packages(str(PACKAGE.parent), include=include))
    folders = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("*.py")}
    assert sorted(folders - shipped) == []


TEST_ONLY = ("clipo_testkit", "tests")  # in the checkout, not in the wheel (tests/test_wheel.py)


def kit_imports(root: Path = PACKAGE, banned: tuple[str, ...] = TEST_ONLY) -> list[str]:
    """Each import of a `banned` top-level package in root's code (function-local ones included)."""
    found = []
    for p in sorted(root.rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else []
            if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names = [n.module]
            where = p.relative_to(root.parent)
            found += [f"{where}: {m}" for m in names if m.split(".")[0] in banned]
    return found


def test_no_product_module_imports_the_test_kit(tmp_path):
    """A product import of the kit or the tests works from a checkout and fails once installed;
    the check sees one in a tiny package."""
    assert kit_imports() == []
    (tmp_path / "clipo_megatron").mkdir()
    (tmp_path / "clipo_megatron" / "a.py").write_text(
        "def f():\n    from clipo_testkit.emulated_cuda import emulated_cuda\n"
    )
    (tmp_path / "clipo_megatron" / "b.py").write_text("import tests.tiny_models\n")
    assert kit_imports(tmp_path / "clipo_megatron") == [
        "clipo_megatron/a.py: clipo_testkit.emulated_cuda",
        "clipo_megatron/b.py: tests.tiny_models",
    ]


@pytest.mark.parametrize("folder", ["bench", "clipo_testkit"])
def test_bench_and_the_kit_import_no_tests(folder, tmp_path):
    """`tests` is pytest's, and NeMo-RL ships a `tests` package of its own that can shadow ours on
    the contract suite's path: what the benches and the kit share lives in `clipo_testkit`. The
    check sees a function-local import in a tiny folder."""
    assert kit_imports(PACKAGE.parent / folder, banned=("tests",)) == []
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "a.py").write_text("def f():\n    from tests.nemo_rl import x\n")
    (tmp_path / folder / "b.py").write_text("from clipo_testkit.nemo_rl import cpu_session\n")
    assert kit_imports(tmp_path / folder, banned=("tests",)) == [f"{folder}/a.py: tests.nemo_rl"]


CONTRIBUTING = PACKAGE.parent / "CONTRIBUTING.md"


def _names(cell: str) -> list[str]:
    return [n.removesuffix(".py").rstrip("/").replace("/", ".") for n in cell.split("`")[1::2]]


def house_map(text: str) -> dict[str, set[str]]:
    """CONTRIBUTING.md's house table: package -> the packages its line says it may import
    ("everything above but X": the lines above it, less X)."""
    section = text.split("## The house", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        above = set(rows)
        named = set(_names(cells[2]))
        allowed = above - named if cells[2].startswith("everything above but") else named
        for n in _names(cells[0]):
            rows[n] = allowed
    return {p: {a for a in allowed if a in rows or a in ALLOWED} for p, allowed in rows.items()}


def test_the_house_map_in_contributing_is_allowed():
    """The map users read and the map this file enforces are one map: the same packages, the
    same arrows."""
    drawn = house_map(CONTRIBUTING.read_text())
    assert sorted(drawn) == sorted(ALLOWED)
    assert {p: sorted(a) for p, a in drawn.items()} == {p: sorted(a) for p, a in ALLOWED.items()}


def test_the_map_check_sees_a_missing_package_and_a_new_arrow():
    text = CONTRIBUTING.read_text()
    assert "verify" not in house_map(text.replace("| `verify/` |", "| `verify_gone/` |"))
    core = text.split("| `core/` |", 1)[1].split("\n", 1)[0]
    drawn = house_map(
        text.replace(core, core.replace("`grader_names`", "`grader_names`, `runner`"))
    )
    assert drawn["core"] == {"file_format", "grader_names", "runner"}
