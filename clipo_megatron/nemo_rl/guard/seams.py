# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Where this integration meets NeMo-RL's code, checked in NeMo-RL's source before a run.

A commit check (`compat`) can only refuse a NeMo-RL it does not know; these checks say *what*
moved. Each `Seam` is one thing the project relies on: a class it subclasses, a method it
overrides and the arguments it passes, a module-level name it rebinds and the call NeMo-RL makes
by that name. `check(pkg_dir)` returns one line per moved seam: which seam, where it was
expected (file, symbol), what is there instead, and the fix. Besides `SEAMS`, every
`from nemo_rl... import name` of the product modules must resolve (`import_seams`; not the CPU
stand-ins, not imports guarded by `except ImportError`). The source is parsed, never imported:
the worker module needs Megatron-Bridge, absent on most login nodes; a module that is already
imported (the driver imports grpo and lm_policy) has its live signatures checked as well.

    python -m clipo_megatron.nemo_rl.guard.seams <NeMo-RL checkout or its nemo_rl/ directory>
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from clipo_megatron.nemo_rl import adapter
from clipo_megatron.nemo_rl.guard.seam_checks import (
    LOSS,
    POLICY,
    WORKER,
    WORKER_CLS,
    check_estimator_call,
    check_loss_enums,
    check_loss_input,
    check_microbatch,
    check_no_clash,
    check_runtime_env,
    check_worker_attrs,
    check_worker_class,
)
from clipo_megatron.nemo_rl.guard.seam_imports import import_seams
from clipo_megatron.nemo_rl.loops import ASYNC_GRPO_TRAIN, GRPO_TRAIN_SYNC
from clipo_megatron.source_match import Seam, Source, method_seam, moved_seams

_W, _P = "worker_extension.py", "policy.py (ClipoPolicyMixin)"
_SUPPORTED = "or install a supported NeMo-RL (v0.7.0, main@7ea279a; docs/nemo_rl.md)"


SEAMS: tuple[Seam, ...] = (
    Seam(
        "worker class",
        WORKER,
        WORKER_CLS,
        "MegatronPolicyWorkerImpl, its Ray actor "
        "MegatronPolicyWorker and that actor's ACTOR_ENVIRONMENT_REGISTRY entry",
        f"ClipoMegatronPolicyWorkerImpl ({_W}) subclasses it; worker_env.py reuses the actor's "
        "venv",
        check_worker_class,
    ),  # fmt: skip
    method_seam(
        "worker get_logprobs",
        WORKER,
        WORKER_CLS,
        "get_logprobs",
        "ClipoWorkerMixin.get_logprobs (worker.py) overrides it: pass what it takes now",
        keywords=("data", "micro_batch_size"),
        complete=False,
    ),  # fmt: skip
    Seam(
        "microbatch fields",
        "models/megatron/data.py",
        "ProcessedMicrobatch",
        "fields data_dict and cu_seqlens_padded",
        "MicrobatchPooler.tee (../megatron/pooling/microbatch_pooler.py) reads them",
        check_microbatch,
    ),  # fmt: skip
    Seam(
        "worker attributes",
        WORKER,
        f"{WORKER_CLS}.__init__",
        "self.model and self.megatron_cfg"
        " set in __init__, self.megatron_cfg.model read as the TransformerConfig",
        f"ClipoMegatronPolicyWorkerImpl._clipo_model_config ({_W}) and ClipoWorkerMixin.get_logprobs "
        "(worker.py) read them",
        check_worker_attrs,
    ),  # fmt: skip
    Seam(
        "mixin names",
        WORKER,
        WORKER_CLS,
        "no member named like ClipoWorkerMixin's own",
        "rename the clashing member of ClipoWorkerMixin (worker.py)",
        check_no_clash,
    ),
    Seam(
        "worker runtime env",
        "models/policy/utils.py",
        "get_runtime_env_for_policy_worker",
        "get_runtime_env_for_policy_worker(name)",
        f"ClipoMegatronPolicyWorker ({_W}) calls it",
        check_runtime_env,
    ),  # fmt: skip
    method_seam(
        "Policy.__init__",
        POLICY,
        "Policy",
        "__init__",
        f"{_P} passes and reads them",
        keywords=("worker_extension_cls_fqn", "weights_path"),
        complete=False,
    ),
    method_seam(
        "Policy.get_logprobs",
        POLICY,
        "Policy",
        "get_logprobs",
        f"{_P} overrides it",
        positional=("data",),
        keywords=("timer",),
    ),
    method_seam(
        "Policy.train",
        POLICY,
        "Policy",
        "train",
        f"{_P} overrides it",
        positional=("data", "loss_fn"),
        complete=False,
    ),
    method_seam(
        "Policy.save_checkpoint",
        POLICY,
        "Policy",
        "save_checkpoint",
        f"{_P} overrides it",
        positional=("weights_path",),
        complete=False,
    ),
    method_seam(
        "Policy.run_all_workers_single_data",
        POLICY,
        "Policy",
        "run_all_workers_single_data",
        f"{_P} calls the CLIPO worker methods with it",
        positional=("method_name",),
        var_kw=True,
    ),  # fmt: skip
    method_seam(
        "estimator protocol",
        "algorithms/advantage_estimator.py",
        "GRPOAdvantageEstimator",
        "compute_advantage",
        "ClipoAdvantageEstimator.compute_advantage (advantage_estimator.py) calls it",
        keywords=("prompt_ids", "rewards", "mask"),
        var_kw=True,
        complete=False,
    ),
    Seam(
        "estimator call",
        adapter.GRPO,
        "grpo_train",
        "compute_advantage(prompt_ids, rewards, mask, ...)",
        "ClipoAdvantageEstimator.compute_advantage (advantage_estimator.py) takes those",
        check_estimator_call,
    ),
    Seam(
        "loss enums",
        LOSS,
        "LossType, LossInputType",
        "LossType.TOKEN_LEVEL, LossType.SEQUENCE_LEVEL, LossInputType.LOGPROB",
        "ObjectiveLossFn (loss_functions.py) uses them",
        check_loss_enums,
    ),  # fmt: skip
    method_seam(
        "loss protocol",
        LOSS,
        "LossFunction",
        "__call__",
        "ObjectiveLossFn.__call__ (loss_functions.py) takes these",
        keywords=("data", "global_valid_seqs", "global_valid_toks"),
        var_kw=True,
        complete=False,
    ),  # fmt: skip
    Seam(
        "loss input",
        "algorithms/loss/utils.py",
        "prepare_loss_input",
        "the LOGPROB loss input passed as next_token_logprobs=",
        "ObjectiveLossFn.__call__ (loss_functions.py) takes next_token_logprobs",
        check_loss_input,
    ),
)


def all_seams() -> list[Seam]:
    """The integration's seams (`SEAMS`), the adapter's rebindings, every NeMo-RL import."""
    return [*SEAMS, *adapter.SEAMS, *import_seams()]


def loop_seams_of(loop: Any) -> tuple[Seam, ...]:
    """The seams only a recipe of `loop` depends on (async_grpo_train's, grpo_train_sync's)."""
    if loop is ASYNC_GRPO_TRAIN:
        from clipo_megatron.nemo_rl.adapter import ASYNC_SEAMS

        return ASYNC_SEAMS
    if loop is GRPO_TRAIN_SYNC:
        from clipo_megatron.nemo_rl.adapter_tq import TQ_SEAMS

        return TQ_SEAMS
    return ()


def seam_list(loop: Any) -> list[str]:
    """What `run_grpo_clipo.py --seams` prints for a recipe of `loop` (`loops.Loop`): each NeMo-RL
    name CLIPO rebinds, by what and for how long (restored when its `with` closes), then each seam
    the preflight reads in NeMo-RL's source before a run of that loop."""
    from clipo_megatron.nemo_rl.adapter_tq import TQ_REBINDINGS

    bound = [r for r in (*adapter.REBINDINGS, *TQ_REBINDINGS) if loop.name in r.loops]
    seams = [*all_seams(), *loop_seams_of(loop)]
    return [
        f"CLIPO rebinds {len(bound)} NeMo-RL names for {loop.name}, each restored when its "
        "`with` closes:",
        *(f"  {r.module}.{r.name}: by {r.binder}, {r.span}" for r in bound),
        f"and relies on {len(seams)} seams in NeMo-RL's source, checked before the run "
        "(fix paths under clipo_megatron/nemo_rl/):",
        *(f"  {s.name}: nemo_rl/{s.rel} {s.symbol}; fix: {s.fix}" for s in seams),
    ]


def _line(seam: Seam, expect: str, where: str, found: str) -> str:
    return (f"seam '{seam.name}' moved: expected {expect} in nemo_rl/{where}; found {found}; "
            f"fix (in clipo_megatron/nemo_rl/): {seam.fix}, {_SUPPORTED}")  # fmt: skip


def check(pkg_dir: str | Path, *, extra: tuple[Seam, ...] = ()) -> list[str]:
    """One line per moved seam of the NeMo-RL package at `pkg_dir` (its nemo_rl/ directory);
    `extra`: the seams of the loop a recipe runs besides grpo_train (`adapter.ASYNC_SEAMS`)."""
    found = moved_seams([*all_seams(), *extra], Source(Path(pkg_dir)))
    return [_line(*moved) for moved in found]


def check_installed(extra: tuple[Seam, ...]) -> list[str]:
    """`extra`'s moved seams in the importable NeMo-RL (one line each), [] when all are in place."""
    import importlib.util

    spec = importlib.util.find_spec("nemo_rl")
    pkg = Path(spec.origin).parent if spec and spec.origin else None
    if pkg is None:
        return []
    return [_line(*moved) for moved in moved_seams(extra, Source(pkg))]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m clipo_megatron.nemo_rl.guard.seams <NeMo-RL checkout>",
            file=sys.stderr,
        )
        return 2
    given = Path(args[0])
    pkg = given / "nemo_rl" if (given / "nemo_rl").is_dir() else given
    if not given.is_dir():
        print(
            f"{given}: no such checkout; pass the folder NeMo-RL was cloned into", file=sys.stderr
        )
        return 2
    if not (pkg / "algorithms").is_dir():  # one line, not one "seam moved" line per seam
        print(
            f"{given} is not a NeMo-RL checkout (no nemo_rl/algorithms/ in it); pass the folder "
            "NeMo-RL was cloned into",
            file=sys.stderr,
        )
        return 2
    lines = check(pkg)
    print("\n".join(lines) if lines else f"all {len(all_seams())} NeMo-RL seams in place: {pkg}")
    return 2 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
