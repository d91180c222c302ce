# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Policy set-up for the single-machine run: Megatron-Core GPTModel + HF generator copy.

The training policy is a Megatron-Core GPTModel (CPU layer spec); the
generator is an HF model of the same weights, re-synced after each update.
"""

from __future__ import annotations

import os
import tempfile

import torch

from clipo_megatron.megatron.model_builder import build_gpt_model, transformer_config
from clipo_megatron.models.hf_convert import arch_from_hf_config, load_megatron_from_hf


def init_single_process() -> None:
    """A world-1 gloo group + megatron parallel_state (TP = PP = 1) + CPU shims."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from clipo_megatron.megatron.cpu_shims import enable_cpu_shims

    if not dist.is_initialized():
        init = tempfile.mktemp(prefix="clipo_run_")
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=0, world_size=1)
    if not torch.cuda.is_available():
        enable_cpu_shims()
    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(1, 1)


def load_hf_policy(source: str, *, tiny_hidden: int = 64, tiny_layers: int = 2, seed: int = 0):
    """(HF model, tokenizer): SmolLM2-135M-Instruct, or a tiny random Llama with its tokenizer."""
    from clipo_megatron.models.smollm2 import load_smollm2, load_smollm2_tokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if source == "smollm2":
        return load_smollm2()
    import transformers

    tok = load_smollm2_tokenizer()
    cfg = transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=tiny_hidden, intermediate_size=2 * tiny_hidden,
        num_hidden_layers=tiny_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).float().eval(), tok


def build_policy(hf_model):
    """A GPTModel holding the HF model's weights, and its architecture."""
    arch = arch_from_hf_config(hf_model.config)
    model = build_gpt_model(arch, transformer_config(arch))
    load_megatron_from_hf(model, hf_model, arch)
    return model, arch
