# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Build a Llama/SmolLM2/Qwen2-layout Megatron-Core GPTModel from a `GPTArch`.

One function for tests, the CPU runner and the converter: RMSNorm, SwiGLU,
RoPE, GQA, optional tied embeddings and QKV bias (Qwen2). On CPU the layer
spec is `get_cpu_gpt_layer_spec` (SDPA attention); on GPU pass your own spec
(TransformerEngine / local).
"""

from __future__ import annotations

import torch

from clipo_megatron.models.arch import GPTArch


def transformer_config(
    arch: GPTArch,
    *,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    sequence_parallel: bool = False,
    params_dtype=torch.float32,
    **overrides,
):
    """A TransformerConfig for `arch` (dropout off: RL logprobs must be deterministic)."""
    from megatron.core.transformer import TransformerConfig

    kw = dict(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_query_groups,
        ffn_hidden_size=arch.ffn_hidden_size,
        kv_channels=arch.hidden_size // arch.num_attention_heads,
        normalization="RMSNorm",
        layernorm_epsilon=arch.norm_eps,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        add_qkv_bias=arch.qkv_bias,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=True,
        params_dtype=params_dtype,
        tensor_model_parallel_size=tensor_parallel,
        pipeline_model_parallel_size=pipeline_parallel,
        sequence_parallel=sequence_parallel,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
    )
    if pipeline_parallel > 1:
        kw["pipeline_dtype"] = params_dtype
    kw.update(overrides)
    return TransformerConfig(**kw)


def build_gpt_model(
    arch: GPTArch,
    config=None,
    *,
    layer_spec=None,
    pre_process: bool = True,
    post_process: bool = True,
):
    """A GPTModel for `arch`; defaults to the CPU spec and a config from `transformer_config`."""
    from megatron.core.models.gpt import GPTModel

    if config is None:
        config = transformer_config(arch)
    if layer_spec is None:
        from clipo_megatron.runner.model.cpu_spec import get_cpu_gpt_layer_spec

        layer_spec = get_cpu_gpt_layer_spec()
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        vocab_size=arch.vocab_size,
        max_sequence_length=arch.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=arch.tie_embeddings,
        position_embedding_type="rope",
        rotary_base=int(arch.rope_theta),
    )


def policy_from_hf(hf_model):
    """(GPTModel holding an HF Llama/Qwen2 model's weights, its GPTArch): TP = PP = 1.

    The one place both drivers build the policy: the single-machine runner
    (`runner.policy.build_policy`) and the NeMo-RL CPU policy worker.
    """
    from clipo_megatron.models.hf_convert import arch_from_hf_config, load_megatron_from_hf

    arch = arch_from_hf_config(hf_model.config)
    model = build_gpt_model(arch, transformer_config(arch))
    load_megatron_from_hf(model, hf_model, arch)
    return model, arch
