# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Reading a package's source without importing it: module-level names, classes, methods, calls,
source lines, and signatures in one form whether read by `ast` or from a live object by
`inspect`."""

from __future__ import annotations

import ast
import difflib
import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


class Absent(Exception):
    """`symbol` (None: the file itself) is not in nemo_rl/`rel`; `near` are similar names."""

    def __init__(self, rel: str, symbol: str | None, near: list[str] | None = None):
        super().__init__(rel, symbol)
        self.rel, self.symbol, self.near = rel, symbol, near or []


class Source:
    """A package's files under `pkg` (NeMo-RL's `nemo_rl/` directory, say), parsed on first use."""

    def __init__(self, pkg: Path):
        self.pkg = pkg
        self._trees: dict[str, ast.Module | None] = {}

    def tree(self, rel: str) -> ast.Module:
        if rel not in self._trees:
            path = self.pkg / rel
            self._trees[rel] = ast.parse(path.read_text(), str(path)) if path.is_file() else None
        found = self._trees[rel]
        if found is None:
            raise Absent(rel, None)
        return found

    def line(self, rel: str, text: str) -> int:
        """The number (from 1) of the first line of `rel` that contains `text`; Absent when the
        file or the text is not there."""
        path = self.pkg / rel
        if not path.is_file():
            raise Absent(rel, None)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if text in line:
                return number
        raise Absent(rel, text)

    def bindings(self, rel: str) -> dict[str, ast.AST]:
        """Module-level names (defs, classes, assignments, imports; also inside if / try)."""
        out: dict[str, ast.AST] = {}
        body = list(self.tree(rel).body)
        while body:
            node = body.pop(0)
            if isinstance(node, ast.If | ast.Try):
                body += node.body + node.orelse + getattr(node, "finalbody", [])
                body += [s for h in getattr(node, "handlers", []) for s in h.body]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                out.update({t.id: node for t in targets if isinstance(t, ast.Name)})
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for a in node.names:
                    out[a.asname or a.name.split(".")[0]] = node
        return out

    def top(self, rel: str, name: str) -> ast.AST:
        names = self.bindings(rel)
        if name not in names:
            raise Absent(rel, name, difflib.get_close_matches(name, names, n=2))
        return names[name]

    def cls(self, rel: str, name: str) -> ast.ClassDef:
        node = self.top(rel, name)
        if not isinstance(node, ast.ClassDef):
            raise Absent(rel, name)
        return node

    def function(self, rel: str, name: str, hops: int = 3) -> ast.FunctionDef:
        """A module-level function, followed through `from nemo_rl.x import name` re-exports."""
        node = self.top(rel, name)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and hops:
            module = str(node.module)
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            if module.split(".")[0] == "nemo_rl":
                return self.function(self.module_rel(module), original, hops - 1)
        if not isinstance(node, ast.FunctionDef):
            raise Absent(rel, name)
        return node

    def module_rel(self, module: str) -> str:
        """nemo_rl.a.b -> "a/b.py" or "a/b/__init__.py" (Absent when neither exists)."""
        base = "/".join(module.split(".")[1:])
        for rel in (f"{base}.py", f"{base}/__init__.py" if base else "__init__.py"):
            if (self.pkg / rel).is_file():
                return rel
        raise Absent(f"{base}.py", None)

    def method(self, rel: str, cls: str, name: str) -> ast.FunctionDef:
        defs = {n.name: n for n in self.cls(rel, cls).body if isinstance(n, ast.FunctionDef)}
        if name not in defs:
            raise Absent(rel, f"{cls}.{name}", difflib.get_close_matches(name, defs, n=2))
        return defs[name]


# ----------------------------------------------------------------------------- signatures


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "pos" (positional or keyword), "posonly", "kwonly", "*", "**"
    default: bool


def ast_params(fn: ast.FunctionDef) -> list[Param]:
    a = fn.args
    pos = [(p, "posonly") for p in a.posonlyargs] + [(p, "pos") for p in a.args]
    first_default = len(pos) - len(a.defaults)
    out = [Param(p.arg, kind, i >= first_default) for i, (p, kind) in enumerate(pos)]
    out += [Param(a.vararg.arg, "*", True)] if a.vararg else []
    out += [Param(p.arg, "kwonly", d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    return out + ([Param(a.kwarg.arg, "**", True)] if a.kwarg else [])


_KINDS = {"POSITIONAL_ONLY": "posonly", "POSITIONAL_OR_KEYWORD": "pos", "KEYWORD_ONLY": "kwonly"}


def code_signature(fn: Callable) -> inspect.Signature:
    """The signature that `fn`'s code takes, not one pasted onto it: Ray's `@ray.remote` sets
    `__signature__` (with `_ray_trace_ctx`) on the unwrapped function of every method of an actor
    class, and NeMo-RL's module decorates `MegatronPolicyWorker(MegatronPolicyWorkerImpl)`, so in
    a process that made the actor class the base's own methods report Ray's signature."""
    inner = inspect.unwrap(fn)  # through decorators (NeMo-RL's wrap_with_nvtx_name) to the code
    if isinstance(inner, types.FunctionType) and "__signature__" in vars(inner):
        bare = types.FunctionType(
            inner.__code__, inner.__globals__, inner.__name__, inner.__defaults__, inner.__closure__
        )
        bare.__kwdefaults__ = inner.__kwdefaults__
        return inspect.signature(bare)
    return inspect.signature(fn)


def opaque(params: list[Param]) -> bool:
    """A signature of only `*args, **kwargs` says nothing of the method it stands for: NeMo-RL
    decorates get_logprobs with `wrap_with_nvtx_name`, whose `wrapper(*args, **kwargs)` keeps no
    `__wrapped__`; the source check (ast) stands for it alone."""
    return all(p.kind in ("*", "**") for p in params)


def live_params(fn: Callable) -> list[Param]:
    out = []
    for p in code_signature(fn).parameters.values():
        kind = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(
            p.kind.name, _KINDS.get(p.kind.name)
        )
        out.append(Param(p.name, str(kind), p.default is not p.empty or kind in ("*", "**")))
    return out


def render(params: list[Param]) -> str:
    parts, star = [], False
    for p in params:
        if p.kind == "kwonly" and not star:
            parts.append("*")
        star = star or p.kind in ("*", "kwonly")
        mark = {"*": "*", "**": "**"}.get(p.kind, "")
        parts.append(f"{mark}{p.name}{'=…' if p.default and not mark else ''}")
    return f"({', '.join(parts)})"


def signature_gap(
    params: list[Param],
    positional: tuple[str, ...],
    keywords: tuple[str, ...],
    var_kw: bool,
    complete: bool = True,
) -> str | None:
    """What keeps a call `f(*positional, **{keywords...})` from binding, else None (`params`
    without `self`). `complete=False`: the project passes its caller's other arguments through."""
    named = {p.name: p for p in params}
    pos = [p.name for p in params if p.kind in ("pos", "posonly")][: len(positional)]
    if pos != list(positional):
        return f"positional parameters {pos} where the call passes {list(positional)}"
    for k in keywords:
        if k not in named or named[k].kind not in ("pos", "kwonly"):
            return f"no keyword parameter {k}"
    if var_kw and not any(p.kind == "**" for p in params):
        return "no **kwargs"
    if not complete:
        return None
    given = {*positional, *keywords}
    required = [p.name for p in params if not p.default and p.name not in given]
    return f"required parameter(s) {required} that the call does not pass" if required else None


def calls(fn: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]


def own_nodes(fn: ast.FunctionDef) -> Iterator[ast.AST]:
    """`fn`'s nodes, not those of the functions defined inside it (their returns are theirs)."""
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


def called_names(fn: ast.AST, *words: str) -> list[str]:
    """What `fn` calls whose own name (the last dotted part) contains one of `words`."""
    names = {ast.unparse(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    return sorted(n for n in names if any(w in n.rsplit(".", 1)[-1].lower() for w in words))


def self_attrs(node: ast.AST, *, stored: bool) -> set[str]:
    ctx = ast.Store if stored else ast.Load
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and isinstance(n.ctx, ctx)
    }
