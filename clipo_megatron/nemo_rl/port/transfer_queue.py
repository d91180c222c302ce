# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Where the integration binds NeMo-RL's TransferQueue loop (`data_plane.enabled`), each beside
the seam that guards it; the synchronous and async loops' are in `rebinding.py` and `grpo_loop.py`.

`grpo_train_sync` (`nemo_rl/algorithms/grpo_sync.py`) keeps the batch in TransferQueue and
passes `KVBatchMeta` (row ids, no tensors) between the driver and the workers:

1. the advantage estimator: `grpo_sync` imports `_create_advantage_estimator` by name, so its
   own module attribute is rebound (`rebinding.advantage_estimator_installed` on that module);
2. the logprob pass: `TQPolicy.get_logprobs_from_meta(meta)` shards `meta` over DP and each
   worker's `get_logprobs_presharded(meta)` fetches its rows and calls the worker's own
   `get_logprobs(data=)`, the method CLIPO's worker extension pools in; the rows' positions in
   the driver's `meta.sample_ids` (the order `compute_advantage` sees) travel to the workers
   before the pass, and each worker maps its shard's ids to them (`worker.ClipoWorkerMixin`);
3. the training call: `TQPolicy.train_from_meta(meta, loss_fn, ...)` instead of `train`
   (CLIPO's warm-up holds the policy there);
4. the policy: NeMo-RL's `TQPolicy` (what `examples/run_grpo.py` builds when
   `data_plane.enabled`) under the CLIPO mixin, with `dp_cfg` the recipe's `data_plane` block;
   `grpo_train_sync` is called inside `with checkpointer:`, as run_grpo.py calls it.

`TQ_SEAMS` are checked in NeMo-RL's source before a run of such a recipe (`guard/preflight.py`).
"""

from __future__ import annotations

import ast
from typing import Any

from clipo_megatron.nemo_rl.port.grpo_loop import (
    GrpoTrainArgs,
    method_calls,
    train_args_fit,
    train_arguments,
)
from clipo_megatron.nemo_rl.port.rebinding import ESTIMATOR, Rebinding
from clipo_megatron.source_match import Seam, Source, method_seam, rebindable
from clipo_megatron.source_match.source import ast_params, render

GRPO_SYNC = "algorithms/grpo_sync.py"
SYNC_TRAIN = "grpo_train_sync"
TQ_POLICY = "models/policy/tq_policy.py"
TQ_POLICY_CLS = "TQPolicy"
TQ_WORKER = "data_plane/worker_mixin.py"
TQ_WORKER_CLS = "TQWorkerMixin"
_HERE = "port/transfer_queue.py"


def grpo_sync_module() -> Any:
    """NeMo-RL's `nemo_rl.algorithms.grpo_sync` (imported when a recipe runs it)."""
    from nemo_rl.algorithms import grpo_sync

    return grpo_sync


def call_grpo_train_sync(sync_module: Any, policy: Any, args: GrpoTrainArgs) -> None:
    """`grpo_train_sync` as NeMo-RL's run_grpo.py calls it: grpo_train's 12 arguments, inside
    `with checkpointer:` (it defers checkpoint finalization to the checkpointer's threads)."""
    with args.checkpointer:
        getattr(sync_module, SYNC_TRAIN)(policy, *train_arguments(args))


def tq_policy_class(mixin: type, **attrs: Any) -> type:
    """NeMo-RL's `TQPolicy` under `mixin`, with `attrs` as class attributes."""
    from nemo_rl.models.policy.tq_policy import TQPolicy

    return type("ClipoTQPolicy", (mixin, TQPolicy), attrs)


def _check_sync(src: Source) -> str | None:
    """grpo_train_sync: the estimator by grpo_sync's module-level name, grpo_train's 12
    arguments, prev_logprobs from the meta (the pass CLIPO pools in) before the advantages, and
    training from the meta."""
    fn = src.function(GRPO_SYNC, SYNC_TRAIN)
    moved = rebindable(src, GRPO_SYNC, fn, ESTIMATOR, "estimator")
    if moved:
        return moved
    params = ast_params(fn)
    later = [p.name for p in params[12:] if not p.default]
    if not train_args_fit(params) or later:
        return f"{SYNC_TRAIN}{render(params)}"
    logprobs = method_calls(fn, "get_logprobs_from_meta")
    advantages = method_calls(fn, "compute_advantage")
    if not logprobs or not advantages or logprobs[0].lineno > advantages[0].lineno:
        return f"{SYNC_TRAIN} does not call policy.get_logprobs_from_meta before compute_advantage"
    if not method_calls(fn, "train_from_meta"):
        return f"{SYNC_TRAIN} does not call policy.train_from_meta"
    return None


SYNC_SEAM = Seam(
    SYNC_TRAIN, GRPO_SYNC, SYNC_TRAIN,
    f"{SYNC_TRAIN}(policy, <grpo_train's arguments>) building its estimator with grpo_sync's "
    f"module-level {ESTIMATOR}(master_config), calling policy.get_logprobs_from_meta before "
    "compute_advantage and policy.train_from_meta",
    f"call_grpo_train_sync ({_HERE}) and advantage_estimator_installed (port/rebinding.py): point "
    f"them at what {SYNC_TRAIN} does now",
    _check_sync,
)  # fmt: skip


def _check_presharded(src: Source) -> str | None:
    fn = src.method(TQ_WORKER, TQ_WORKER_CLS, "get_logprobs_presharded")
    names = [p.name for p in ast_params(fn)]
    if names[1:2] != ["meta"] or "micro_batch_size" not in names:
        return f"get_logprobs_presharded{render(ast_params(fn))}"
    own = [
        c for c in method_calls(fn, "get_logprobs") if ast.unparse(c.func) == "self.get_logprobs"
    ]
    if not own or not any(k.arg == "data" for k in own[0].keywords):
        return "get_logprobs_presharded does not call self.get_logprobs(data=...)"
    return None


PRESHARDED_SEAM = Seam(
    "worker get_logprobs_presharded", TQ_WORKER, f"{TQ_WORKER_CLS}.get_logprobs_presharded",
    "get_logprobs_presharded(meta, micro_batch_size=) fetching this rank's rows and calling "
    "self.get_logprobs(data=...)",
    "ClipoWorkerMixin.get_logprobs_presharded (worker.py) maps the shard's sample ids to rows "
    "there: point it at what the worker's TransferQueue logprob entry point does now",
    _check_presharded,
)  # fmt: skip

_POLICY_FIX = (
    f"ClipoTQPolicyMixin (policy.py) overrides it: point it at what {TQ_POLICY_CLS} has now"
)

SEAMS_OF_TQ_POLICY = tuple(
    method_seam(f"TQPolicy {meth}", TQ_POLICY, TQ_POLICY_CLS, meth, _POLICY_FIX,
                positional=positional, keywords=keywords, complete=False)
    for meth, positional, keywords in (
        ("get_logprobs_from_meta", ("meta",), ("micro_batch_size", "timer")),
        ("train_from_meta", ("meta",), ("loss_fn",)),
        ("read_from_dataplane", ("meta",), ("select_fields", "pad_value_dict")),
        ("__init__", (), ("dp_cfg",)),
    )
)  # fmt: skip


# Checked by the preflight for a recipe grpo_train_sync runs (loops.GRPO_TRAIN_SYNC) only.
TQ_SEAMS: tuple[Seam, ...] = (SYNC_SEAM, PRESHARDED_SEAM, *SEAMS_OF_TQ_POLICY)

TQ_REBINDINGS: tuple[Rebinding, ...] = (  # grpo_sync imports the estimator's name: its own copy
    Rebinding(
        GRPO_SYNC, ESTIMATOR, "advantage_estimator_installed (port/rebinding.py)", (SYNC_TRAIN,),
        "for the whole loop (driver.run)",
    ),
)  # fmt: skip
