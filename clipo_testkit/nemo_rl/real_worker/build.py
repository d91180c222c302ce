# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Build the product's `ClipoMegatronPolicyWorkerImpl` on CPU through NeMo-RL's real `__init__`.

What is ours here (test code): a tiny Llama written to a local directory for Bridge's AutoBridge to
import (no hub), the policy section of the contract recipe made CPU-ready (fp32, torch Adam, no
fusions, no distributed optimizer / overlap), the layer spec handed to the worker's own hook
(`_transformer_layer_spec`, read by `MegatronPolicyWorkerImpl.__init__` for the HF import), and the
patches of `cpu_patches`. Everything else -- the HF import and its Megatron checkpoint, Bridge's
`initialize_megatron`, model / DDP / optimizer / scheduler setup, the reference model, tokenizer and
finalisation -- is NeMo-RL's and Bridge's own code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from clipo_testkit.nemo_rl.real_worker.thd_attention import cpu_thd_layer_spec


def requirements() -> str | None:
    """None when NeMo-RL, Megatron-Bridge and Megatron-LM sources are there; else what is missing."""
    for env, inner in (
        ("NEMO_RL_SRC", "nemo_rl/__init__.py"),
        ("BRIDGE_SRC", "src/megatron/bridge/__init__.py"),
        ("MEGATRON_LM_SRC", "megatron/core/__init__.py"),
    ):
        src = os.environ.get(env)
        if not src or not Path(src, inner).exists():
            return (
                f"{env} is not set to a checkout with {inner}: run "
                "`NEMO_RL_SRC=<checkout> bash scripts/test_nemo_rl.sh` (BRIDGE_SRC, MEGATRON_LM_SRC: "
                "NeMo-RL's submodules unless set)"
            )
    try:
        import nemo_rl  # noqa: F401
    except ImportError as e:  # pragma: no cover - wrong environment
        return f"NeMo-RL does not import here ({e}); use scripts/test_nemo_rl.sh"
    return None


def tiny_model(path: Path, *, hidden: int = 64, seed: int = 0) -> Path:
    """A random tiny Llama + the project's character tokenizer, saved for AutoBridge to import."""
    import transformers

    from clipo_testkit.tiny_models import char_tokenizer, tiny_llama_config

    if (path / "config.json").exists():
        return path
    tok = char_tokenizer()
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(tiny_llama_config(tok, hidden=hidden)).float()
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


def cpu_policy_config(policy: dict[str, Any], out_dir: Path | None = None) -> dict[str, Any]:
    """The recipe's policy section with what only a GPU runs switched off (fp32, torch Adam).
    out_dir: where the HF import's Megatron checkpoint goes unless NRL_MEGATRON_CHECKPOINT_DIR is
    set (the contract fixture sets it once for all runs)."""
    policy = dict(policy)
    policy["precision"] = "float32"
    mc = policy["megatron_cfg"] = dict(policy["megatron_cfg"])
    mc.update(
        pipeline_dtype="float32",
        activation_checkpointing=False,
        apply_rope_fusion=False,
        bias_activation_fusion=False,
        moe_permute_fusion=False,
        gradient_accumulation_fusion=False,
        empty_unused_memory_level=0,
        train_iters=1000,  # grpo.setup sets it from the run length (grpo.py: "train_iters")
    )
    mc["optimizer"] = {
        **mc["optimizer"],
        "bf16": False,
        "fp16": False,
        "use_distributed_optimizer": False,
        "use_precision_aware_optimizer": False,
    }
    mc["distributed_data_parallel_config"] = {
        **mc["distributed_data_parallel_config"],
        "overlap_grad_reduce": False,
        "overlap_param_gather": False,
        "grad_reduce_in_fp32": False,
    }
    mc["checkpoint"] = {**(mc.get("checkpoint") or {}), "async_save": False}
    if out_dir is not None:
        os.environ.setdefault("NRL_MEGATRON_CHECKPOINT_DIR", str(out_dir / "megatron_ckpt"))
    return policy


def contract_policy(model_dir: Path, out_dir: Path, *, dp: int = 1, packing: bool = True) -> dict:
    """The contract suite's GRPO recipe (NeMo-RL's parent merged), policy section, CPU-ready."""
    from clipo_testkit.nemo_rl.nemo_rl_loop import contract_config

    cfg = contract_config(
        "grpo", True, model_dir=model_dir, out_dir=out_dir, max_steps=3, dp=dp, packing=packing
    )
    return cpu_policy_config(cfg["policy"], out_dir)


def build_worker(
    policy: dict[str, Any],
    *,
    dp: int = 1,
    sharding=None,
    weights_path: str | None = None,
    optimizer_path: str | None = None,
):
    """The product's ClipoMegatronPolicyWorkerImpl with the checks' reads (`InspectionMixin`),
    constructed by NeMo-RL's real __init__
    (call inside `cpu_patches.cpu_worker_patches`, with torch.distributed env vars set).
    sharding: NeMo-RL's NamedSharding of the ranks (default: `dp` data-parallel ranks)."""
    import numpy as np
    import transformers
    from nemo_rl.distributed.named_sharding import NamedSharding

    from clipo_megatron.nemo_rl.worker_extension import ClipoMegatronPolicyWorkerImpl
    from clipo_testkit.nemo_rl.inspection import InspectionMixin

    class InspectedWorker(InspectionMixin, ClipoMegatronPolicyWorkerImpl):
        pass

    tokenizer = transformers.AutoTokenizer.from_pretrained(policy["tokenizer"]["name"])
    if sharding is None:
        sharding = NamedSharding(
            layout=np.arange(dp).reshape(1, dp, 1, 1),
            names=["pipeline_parallel", "data_parallel", "context_parallel", "tensor_parallel"],
        )
    worker = InspectedWorker.__new__(InspectedWorker)
    worker._transformer_layer_spec = cpu_thd_layer_spec  # the worker's own hook (HF import)
    worker.__init__(  # type: ignore[misc]
        policy,
        tokenizer,
        weights_path,
        optimizer_path,
        init_optimizer=True,
        init_reference_model=True,
        worker_sharding_annotations=sharding,
    )
    return worker
