# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The checks behind `seams.SEAMS`: each reads NeMo-RL's source and returns None when the seam
is in place, else what it found instead (raising `Absent` for a missing file or symbol)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clipo_megatron.nemo_rl.seam_source import (
    Absent,
    Source,
    ast_params,
    called_names,
    calls,
    live_params,
    opaque,
    render,
    self_attrs,
    signature_gap,
)

__all__ = ["Absent", "Seam", "Source", "method_seam"]

WORKER = "models/policy/workers/megatron_policy_worker.py"
WORKER_CLS = "MegatronPolicyWorkerImpl"
POLICY = "models/policy/lm_policy.py"
GRPO = "algorithms/grpo.py"
LOSS = "algorithms/loss/interfaces.py"
ITERATOR = "get_microbatch_iterator"  # teed_microbatches' default name
ESTIMATOR = "_create_advantage_estimator"
STOCK_WORKER_FQN = "nemo_rl.models.policy.workers.megatron_policy_worker.MegatronPolicyWorker"
_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Seam:
    name: str
    rel: str  # file under nemo_rl/
    symbol: str
    expect: str  # what the project relies on, in words
    fix: str  # where in clipo_megatron/nemo_rl/ the project adapts to a move
    check: Callable[[Source], str | None] = field(repr=False)  # None: in place; else found


def method_seam(name: str, rel: str, cls: str, meth: str, fix: str, *, positional=(),
                keywords=(), var_kw=False, complete=True) -> Seam:  # fmt: skip
    """`cls.meth` binds the call the project makes (`complete=False`: it also passes its
    caller's arguments through); checked in the source, and live where the module is imported."""
    shown = [*positional, *(f"{k}=" for k in keywords), *(["**kw"] if var_kw else [])]
    shown += [] if complete or var_kw else ["..."]

    def check(src: Source) -> str | None:
        params = ast_params(src.method(rel, cls, meth))[1:]  # without self
        gap = signature_gap(params, positional, keywords, var_kw, complete)
        module = sys.modules.get("nemo_rl." + rel[:-3].replace("/", "."))
        live = getattr(getattr(module, cls, None), meth, None) if module else None
        live_ps = live_params(live) if gap is None and callable(live) else []
        if gap is None and live_ps and not opaque(live_ps):
            params = live_ps[1:]
            gap = signature_gap(params, positional, keywords, var_kw, complete)
            gap = gap and f"the imported {cls}.{meth} differs from its source: {gap}"
        return gap and f"{meth}{render(params)}: {gap}"

    return Seam(name, rel, f"{cls}.{meth}", f"{meth}({', '.join(shown)})", fix, check)


def check_worker_class(src: Source) -> str | None:
    src.cls(WORKER, WORKER_CLS)
    src.cls(WORKER, "MegatronPolicyWorker")  # the Ray actor whose venv the extension borrows
    registry = src.tree("distributed/ray_actor_environment_registry.py")
    keys = {n.value for n in ast.walk(registry) if isinstance(n, ast.Constant)}
    return None if STOCK_WORKER_FQN in keys else f"no registry entry {STOCK_WORKER_FQN!r}"


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


def check_iterator(src: Source) -> str | None:
    fn = src.method(WORKER, WORKER_CLS, "get_logprobs")
    moved = rebindable(src, WORKER, fn, ITERATOR, "microbatch")
    if moved:
        return moved
    found = calls(fn, ITERATOR)
    unpacked = any(
        isinstance(n, ast.Assign) and n.value in found and isinstance(n.targets[0], ast.Tuple)
        for n in ast.walk(fn)
    )
    return None if unpacked else f"get_logprobs does not unpack {ITERATOR}(...) as a tuple"


def check_microbatch(src: Source) -> str | None:
    body = src.cls("models/megatron/data.py", "ProcessedMicrobatch").body
    fields = {
        n.target.id for n in body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }  # fmt: skip  (a dataclass: annotated fields)
    missing = [f for f in ("data_dict", "cu_seqlens_padded") if f not in fields]
    return f"no field(s) {missing}" if missing else None


def check_worker_attrs(src: Source) -> str | None:
    stored = self_attrs(src.method(WORKER, WORKER_CLS, "__init__"), stored=True)
    missing = [a for a in ("model", "megatron_cfg") if a not in stored]
    if missing:
        return f"__init__ sets no self.{', self.'.join(missing)}"
    reads = [n for n in ast.walk(src.cls(WORKER, WORKER_CLS)) if isinstance(n, ast.Attribute)
             and n.attr == "model" and ast.unparse(n.value) == "self.megatron_cfg"]  # fmt: skip
    return None if reads else "self.megatron_cfg.model is never read"


def mixin_names() -> set[str]:
    """ClipoWorkerMixin's own members, read from worker.py (importing it pulls in torch)."""
    tree = ast.parse((_HERE / "worker.py").read_text())
    mixin = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ClipoWorkerMixin"
    )
    names = {n.name for n in mixin.body if isinstance(n, ast.FunctionDef)}
    names |= {n.target.id for n in mixin.body if isinstance(n, ast.AnnAssign)
              and isinstance(n.target, ast.Name)}  # fmt: skip
    return {n for n in names if "clipo" in n} | {"_clipo_model_config"}


def check_no_clash(src: Source) -> str | None:
    cls = src.cls(WORKER, WORKER_CLS)
    own = self_attrs(cls, stored=True) | {
        n.name for n in cls.body if isinstance(n, ast.FunctionDef)
    }
    clash = sorted(mixin_names() & own)
    return f"{WORKER_CLS} defines {clash} itself" if clash else None


def check_runtime_env(src: Source) -> str | None:
    params = ast_params(src.function("models/policy/utils.py", "get_runtime_env_for_policy_worker"))
    first = [p for p in params if p.kind in ("pos", "posonly")][:1]
    rest = [p for p in params if not p.default and p not in first]
    return None if first and not rest else f"get_runtime_env_for_policy_worker{render(params)}"


def check_policy_factory(src: Source) -> str | None:
    setup = src.function(GRPO, "setup")
    if "policy_factory" not in {p.name for p in ast_params(setup)}:
        return f"setup{render(ast_params(setup))}: no policy_factory parameter"
    kws = {k.arg for n in ast.walk(setup) if isinstance(n, ast.Call) for k in n.keywords}
    return None if "weights_path" in kws else "setup passes weights_path= to no call"


def check_estimator(src: Source) -> str | None:
    train = src.function(GRPO, "grpo_train")
    moved = rebindable(src, GRPO, train, ESTIMATOR, "estimator")
    if moved:
        return moved
    bad = [ast.unparse(c) for c in calls(train, ESTIMATOR) if len(c.args) != 1 or c.keywords]
    return f"grpo_train calls {bad[0]}; the wrapper takes master_config alone" if bad else None


def check_estimator_call(src: Source) -> str | None:
    for c in ast.walk(src.function(GRPO, "grpo_train")):
        if isinstance(c, ast.Call) and ast.unparse(c.func).endswith(".compute_advantage"):
            passed = {"prompt_ids", "rewards", "mask"} & {k.arg for k in c.keywords}
            if len(c.args) + len(passed) < 3:
                return f"grpo_train calls {ast.unparse(c)[:120]}"
    return None


def check_grpo_train_args(src: Source) -> str | None:
    params = ast_params(src.function(GRPO, "grpo_train"))
    pos = [p.name for p in params if p.kind in ("pos", "posonly")]
    later = [p.name for p in params[12:] if not p.default]
    fine = pos[8:9] == ["logger"] and pos[11:12] == ["master_config"] and not later
    return None if fine else f"grpo_train{render(params)}"


def check_loss_enums(src: Source) -> str | None:
    want = {"LossType": ("TOKEN_LEVEL", "SEQUENCE_LEVEL"), "LossInputType": ("LOGPROB",)}
    gone = []
    for cls, members in want.items():
        body = src.cls(LOSS, cls).body
        have = {t.id for n in body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}  # fmt: skip
        gone += [f"{cls}.{m}" for m in members if m not in have]
    return f"no {', '.join(gone)}" if gone else None


def check_loss_input(src: Source) -> str | None:
    fn = src.function("algorithms/loss/utils.py", "prepare_loss_input")
    keys = {n.value for n in ast.walk(fn) if isinstance(n, ast.Constant)}
    return None if "next_token_logprobs" in keys else "next_token_logprobs is never named"
