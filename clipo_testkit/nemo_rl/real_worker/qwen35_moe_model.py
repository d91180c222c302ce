# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A tiny Qwen3.5 MoE (`Qwen3_5MoeForConditionalGeneration`: the architecture of NeMo-RL's
Qwen3.5 MoE recipes' `Qwen/Qwen3.5-35B-A3B-Base` and `Qwen3.5-397B-A17B`) for Megatron-Bridge's
`Qwen35VLMoEBridge` (`qwen35_vl_bridge.py`). Test code.

The layer layout and the vision encoder are `qwen35_model`'s (3 gated DeltaNet + 1 gated attention
layer, twice; a 1-block ViT); every layer's MLP is Qwen3.5-MoE's sparse block: 4 routed experts,
top-2 (softmax, renormalised over the picked two), and one shared expert behind its sigmoid gate
(`shared_expert_gate`; Megatron-Core's SharedExpertMLP with `moe_shared_expert_gate`). Bridge's MoE
provider asks for TE's grouped GEMM and permutation kernel; on CPU the experts are Megatron-Core's
SequentialMLP (`te_cpu_modules.CpuBackend.grouped_mlp_modules`, `cpu_patches.CPU_PROVIDER_FIELDS`)
and the token dispatcher is the recipes' `alltoall`. The build runs under `qwen35_model`'s
`cpu_qwen35_patches`, as the dense model's.
"""

from __future__ import annotations

from pathlib import Path

import torch

from clipo_testkit.nemo_rl.real_worker.qwen35_model import LAYER_TYPES

EXPERTS, TOP_K = 4, 2
ROUTER_STD = 0.5  # routers drawn wider than HF init (0.02): top-2 gaps > 1e-4 on both batches


def tiny_qwen35_moe_model(path: Path, *, hidden: int = 64, seed: int = 0) -> Path:
    """A random tiny Qwen3_5MoeForConditionalGeneration + the character tokenizer, saved."""
    import transformers

    from clipo_testkit.tiny_models import char_tokenizer

    if (path / "config.json").exists():
        return path
    tok = char_tokenizer()
    n = len(tok)  # the vision ids sit past the tokenizer's vocabulary: no text row holds one
    text = dict(
        vocab_size=n + 4,
        hidden_size=hidden,
        num_hidden_layers=len(LAYER_TYPES),
        layer_types=LAYER_TYPES,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        num_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    vision = dict(
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=4,
        temporal_patch_size=2,
        spatial_merge_size=2,
        out_hidden_size=hidden,
        num_position_embeddings=16,
    )
    config = transformers.Qwen3_5MoeConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=n,
        video_token_id=n + 1,
        vision_start_token_id=n + 2,
        vision_end_token_id=n + 3,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen3_5MoeForConditionalGeneration(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:  # HF's zero-centred norms start at 0: drawn
                p.normal_(0.0, 0.1)
            elif name.endswith("mlp.gate.weight"):
                p.normal_(0.0, ROUTER_STD)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path
