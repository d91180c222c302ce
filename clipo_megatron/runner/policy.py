# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Policy set-up for the single-machine run: Megatron-Core GPTModel + HF generator copy.

The training policy is a Megatron-Core GPTModel (CPU layer spec); the
generator is an HF model of the same weights, re-synced after each update.
"""

from __future__ import annotations

import os

import torch

from clipo_megatron.megatron.model_builder import (
    build_gpt_model,
    policy_from_hf,
    transformer_config,
)
from clipo_megatron.models.hf_convert import (
    arch_from_hf_config,
    hf_to_megatron,
    load_megatron_state,
)


def init_single_process() -> None:
    """A world-1 gloo group + Megatron's model-parallel groups (TP = PP = 1) + CPU shims."""
    from clipo_megatron.runner.parallel import init_distributed

    init_distributed(1, 1)


def load_hf_policy(source: str, *, tiny_hidden: int = 64, tiny_layers: int = 2, seed: int = 0):
    """(HF model, tokenizer): SmolLM2-135M-Instruct, or a tiny random Llama with its tokenizer."""
    from clipo_megatron.models.smollm2 import load_smollm2, load_smollm2_tokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if source == "smollm2":
        return load_smollm2()
    import transformers

    tok = load_smollm2_tokenizer()
    cfg = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=tiny_hidden,
        intermediate_size=2 * tiny_hidden,
        num_hidden_layers=tiny_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).float().eval(), tok


def build_policy(hf_model, tp: int = 1, pp: int = 1):
    """A GPTModel holding the HF model's weights (this rank's stage and TP shard of them), and its architecture."""
    if tp == 1 and pp == 1:
        return policy_from_hf(hf_model)
    arch = arch_from_hf_config(hf_model.config)
    from clipo_megatron.megatron import parallel as mp
    from clipo_megatron.megatron.tp_state import check_divisible
    from clipo_megatron.runner.pipeline import layer_offset, local_from_full

    check_divisible(arch, tp)
    layer_offset(arch.num_layers)  # pp must divide the layers
    model = build_gpt_model(
        arch,
        transformer_config(arch, tensor_parallel=tp, pipeline_parallel=pp),
        pre_process=mp.is_pipeline_first_stage(),
        post_process=mp.is_pipeline_last_stage(),
    )
    load_megatron_state(
        model,
        local_from_full(model.state_dict(), hf_to_megatron(hf_model.state_dict(), arch), arch),
    )
    return model, arch
