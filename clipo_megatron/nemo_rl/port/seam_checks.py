# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The seams of NeMo-RL's worker, policy, estimator and loss CLIPO relies on (`SEAMS`), and the
checks behind them: each reads NeMo-RL's source and returns None when the seam is in place, else
what it found instead (raising `Absent` for a missing file or symbol)."""

from __future__ import annotations

import ast
from pathlib import Path

from clipo_megatron.nemo_rl.port.grpo_loop import STOCK_MEGATRON_WORKER_FQN as STOCK_WORKER_FQN
from clipo_megatron.nemo_rl.port.rebinding import GRPO, WORKER, WORKER_CLS
from clipo_megatron.source_match import Absent, Seam, Source, method_seam
from clipo_megatron.source_match.source import ast_params, render, self_attrs

__all__ = ["GRPO", "STOCK_WORKER_FQN", "WORKER", "WORKER_CLS", "Absent", "Seam", "Source"]

POLICY = "models/policy/lm_policy.py"
LOSS = "algorithms/loss/interfaces.py"
_INTEGRATION = Path(__file__).resolve().parents[1]  # clipo_megatron/nemo_rl/


def check_worker_class(src: Source) -> str | None:
    src.cls(WORKER, WORKER_CLS)
    src.cls(WORKER, "MegatronPolicyWorker")  # the Ray actor whose venv the extension borrows
    registry = src.tree("distributed/ray_actor_environment_registry.py")
    keys = {n.value for n in ast.walk(registry) if isinstance(n, ast.Constant)}
    return None if STOCK_WORKER_FQN in keys else f"no registry entry {STOCK_WORKER_FQN!r}"


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
    tree = ast.parse((_INTEGRATION / "worker.py").read_text())
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


def check_estimator_call(src: Source) -> str | None:
    for c in ast.walk(src.function(GRPO, "grpo_train")):
        if isinstance(c, ast.Call) and ast.unparse(c.func).endswith(".compute_advantage"):
            passed = {"prompt_ids", "rewards", "mask"} & {k.arg for k in c.keywords}
            if len(c.args) + len(passed) < 3:
                return f"grpo_train calls {ast.unparse(c)[:120]}"
    return None


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


_W, _P = "worker_extension.py", "policy.py (ClipoPolicyMixin)"


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
        GRPO,
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
