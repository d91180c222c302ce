# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The two module-level names of NeMo-RL CLIPO rebinds, each beside the seam that guards it.

NeMo-RL declares no extension point for these, so they are bound here and nowhere else: moving to
a declared point (an estimator hook, say) changes this module and the version modules alone.
Nothing of NeMo-RL is edited on disk, and every rebinding is undone when its `with` ends (also on
an exception); `run_grpo_clipo.py --validate-only --seams` lists them (`seams.seam_list`).

1. the advantage estimator: `grpo_train` and `async_grpo_train` build it with the module-level
   `_create_advantage_estimator(master_config)`, looked up at call time (`grpo_sync` imports the
   name, so its own copy is rebound: `transfer_queue.TQ_REBINDINGS`);
2. the logprob pass's microbatches: the Megatron worker's `get_logprobs` reads them from its
   module's `get_microbatch_iterator`, returning (iterator, *meta).
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from clipo_megatron.source_match import Seam, Source, rebindable
from clipo_megatron.source_match.source import calls

GRPO = "algorithms/grpo.py"
WORKER = "models/policy/workers/megatron_policy_worker.py"
WORKER_CLS = "MegatronPolicyWorkerImpl"
ESTIMATOR = "_create_advantage_estimator"
ITERATOR = "get_microbatch_iterator"
_HERE = "port/rebinding.py"


@dataclass(frozen=True)
class Rebinding:
    """A module-level name of NeMo-RL that CLIPO rebinds while a `with` of `binder` is open and
    restores when it closes (also on an exception); `--seams` lists them (`port/seams.py`)."""

    rel: str  # NeMo-RL's file, under nemo_rl/
    name: str
    binder: str  # the context manager that binds and restores it, `file.py` here
    loops: tuple[str, ...]  # the loops that run with it bound
    span: str  # how long it stays bound

    @property
    def module(self) -> str:
        return "nemo_rl." + self.rel.removesuffix(".py").replace("/", ".")


REBINDINGS: tuple[Rebinding, ...] = (
    Rebinding(
        GRPO,
        ESTIMATOR,
        f"advantage_estimator_installed ({_HERE})",
        ("grpo_train", "async_grpo_train"),
        "for the whole loop (driver.run)",
    ),
    Rebinding(
        WORKER,
        ITERATOR,
        f"microbatches_teed ({_HERE})",
        ("grpo_train", "async_grpo_train", "grpo_train_sync"),
        "inside each worker, for one get_logprobs call (ClipoWorkerMixin.get_logprobs)",
    ),
)  # fmt: skip; grpo_train_sync's own estimator name: transfer_queue.TQ_REBINDINGS

# ----------------------------------------------------------------- 1. the advantage estimator


@contextlib.contextmanager
def advantage_estimator_installed(grpo_module: Any, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """For the `with`: every estimator the loop in `grpo_module` builds is `wrap(what NeMo-RL
    built)` (`grpo`, or `grpo_sync`, which imports the name: `transfer_queue.py`)."""
    original = getattr(grpo_module, ESTIMATOR, None)
    if original is None:
        raise RuntimeError(
            f"{getattr(grpo_module, '__name__', grpo_module)}.{ESTIMATOR} not found: this NeMo-RL "
            "differs from the "
            "versions this integration supports (port/versions/, docs/nemo_rl.md)"
        )
    setattr(grpo_module, ESTIMATOR, lambda master_config: wrap(original(master_config)))
    try:
        yield
    finally:
        setattr(grpo_module, ESTIMATOR, original)


def _check_estimator(src: Source) -> str | None:
    train = src.function(GRPO, "grpo_train")
    moved = rebindable(src, GRPO, train, ESTIMATOR, "estimator")
    if moved:
        return moved
    bad = [ast.unparse(c) for c in calls(train, ESTIMATOR) if len(c.args) != 1 or c.keywords]
    return f"grpo_train calls {bad[0]}; the wrapper takes master_config alone" if bad else None


ESTIMATOR_SEAM = Seam(
    "advantage estimator", GRPO, f"{ESTIMATOR}, module level",
    f"grpo_train building its estimator with the module-level {ESTIMATOR}(master_config), "
    "looked up by that name",
    f"advantage_estimator_installed ({_HERE}) rebinds it: point it at what grpo_train calls "
    "now",
    _check_estimator,
)  # fmt: skip


# ------------------------------------------------------------ 2. the logprob pass's microbatches


@contextlib.contextmanager
def microbatches_teed(module: Any, pooler: Any) -> Iterator[None]:
    """For the `with`: `module.get_microbatch_iterator`'s iterator goes through `pooler.tee`."""
    original = getattr(module, ITERATOR, None)
    if original is None:
        raise RuntimeError(
            f"{getattr(module, '__name__', module)}.{ITERATOR} not found: this NeMo-RL differs "
            "from the versions this integration supports (port/versions/, docs/nemo_rl.md)"
        )

    def teed(*args: Any, **kwargs: Any) -> tuple:
        it, *rest = original(*args, **kwargs)
        return (pooler.tee(it), *rest)

    setattr(module, ITERATOR, teed)
    try:
        yield
    finally:
        setattr(module, ITERATOR, original)


def _check_iterator(src: Source) -> str | None:
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


ITERATOR_SEAM = Seam(
    "microbatch iterator", WORKER, f"{ITERATOR}, module level",
    f"get_logprobs calling the module-level {ITERATOR} by that name and unpacking "
    "(iterator, *meta)",
    f"microbatches_teed ({_HERE}) and ClipoMegatronPolicyWorkerImpl._clipo_iterator_module "
    "(worker_extension.py) wrap it: point them at what get_logprobs calls now",
    _check_iterator,
)  # fmt: skip
