# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The seams no table lists: every `from nemo_rl... import name` in the integration's own modules
must resolve in the NeMo-RL being checked, so a renamed or moved name is one "seam moved" line
before a run instead of an ImportError inside a Ray actor. Read from the product's source (not
the CPU stand-ins, not imports guarded by `except ImportError`), once per process."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from clipo_megatron.source_match import Seam, Source

_INTEGRATION = Path(__file__).resolve().parents[1]  # clipo_megatron/nemo_rl/, guard/ included


def import_seam(module: str, name: str, where: str) -> Seam:
    def check(src: Source) -> str | None:
        rel = src.module_rel(module)
        sub = "/".join([*module.split(".")[1:], name])
        if not ((src.pkg / f"{sub}.py").is_file() or (src.pkg / sub / "__init__.py").is_file()):
            src.top(rel, name)  # a name, not a submodule
        return None

    base = "/".join(module.split(".")[1:]) or "__init__"
    return Seam(f"import {module}.{name}", f"{base}.py", name, f"{name} in {module}",
                f"{where} imports it", check)  # fmt: skip


@functools.cache  # the product's own source: read once per process
def import_seams(root: Path = _INTEGRATION) -> tuple[Seam, ...]:
    """Every `from nemo_rl... import x` of the product modules (not cpu_*: the CPU stand-ins)."""
    seams: dict[tuple[str, str], Seam] = {}
    for path in sorted(root.rglob("*.py")):
        if path.name.startswith("cpu_"):
            continue
        tree = ast.parse(path.read_text())
        optional = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                    and any("ImportError" in ast.unparse(h.type or t) for h in t.handlers)
                    for s in t.body for n in ast.walk(s)}  # fmt: skip
        for node in ast.walk(tree):
            if (isinstance(node, ast.ImportFrom) and node.level == 0 and id(node) not in optional
                    and str(node.module).split(".")[0] == "nemo_rl"):  # fmt: skip
                for a in node.names:
                    key = (str(node.module), a.name)
                    seams.setdefault(
                        key, import_seam(*key, f"{path.relative_to(root).as_posix()}:{node.lineno}")
                    )
    return tuple(seams.values())
