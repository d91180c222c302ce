# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A tiny DeepSeek-V3 (the MLA family: DeepSeek-V3, Moonlight, Kimi) for NeMo-RL's real worker on
CPU, imported by Bridge's `deepseek_v3_bridge.py` (MLAModelProvider, Megatron-Core's
`MLASelfAttention`) from Hugging Face files, as NeMo-RL imports a recipe's model.

The model: multi-latent attention with a Q LoRA rank, a KV LoRA rank, a rope part and a no-rope
part of the query / key head and a value head of another size (so Megatron-Core's THD value
padding runs); YaRN RoPE (DeepSeek-V3's; Moonlight runs plain RoPE), interleaved as Hugging Face's
`rope_interleave` and Megatron-Core's MLA both default; a dense first layer
(`first_k_dense_replace`) then an MoE layer of 4 routed experts, top-2, one shared expert, sigmoid
scores with a non-zero expert bias (`e_score_correction_bias`), grouped routing (2 groups, the
best 1 kept) and DeepSeek's routed scaling factor.

What stands in on CPU (each a debt: a GPU run uses TransformerEngine's):
- the core attention: `MLAPackedSDPAAttention` (torch SDPA with the block-diagonal mask of
  `thd_attention`), returning the THD layout TE's returns ([T, np * hn]) so Megatron-Core's own
  pad-then-trim of the value head runs; TE's fused attention with MLA's `k_channels != v_channels`
  is not exercised;
- the norms: torch's RMSNorm (TENorm; the Q / KV LoRA norms as `MLACompressedNorm`, marked SP);
- experts `SequentialMLP` (grouped GEMM), permute fusion off, the shared-expert overlap off (a
  stream), as `moe_model` (and `cpu_patches.CPU_PROVIDER_FIELDS`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from clipo_testkit.nemo_rl.real_worker.thd_attention import ContextParallelSDPAAttention

EXPERTS, TOP_K, GROUPS, TOPK_GROUP = 4, 2, 2, 1
YARN = {  # DeepSeek-V3's rope_scaling in small: factor = max_position_embeddings / original
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 256,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


def tiny_mla_model(path: Path, *, hidden: int = 64, seed: int = 0) -> Path:
    """A random tiny DeepSeek-V3 + the project's character tokenizer, saved for AutoBridge."""
    import transformers

    from clipo_testkit.tiny_models import char_tokenizer

    if (path / "config.json").exists():
        return path
    tok = char_tokenizer()
    config = transformers.DeepseekV3Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        first_k_dense_replace=1,  # layer 0 dense, layer 1 MoE
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=12,  # != 16 + 8: Megatron-Core pads the value under THD and trims after
        n_routed_experts=EXPERTS,
        n_shared_experts=1,
        num_experts_per_tok=TOP_K,
        n_group=GROUPS,
        topk_group=TOPK_GROUP,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        max_position_embeddings=1024,
        rope_parameters=dict(YARN),
        rope_interleave=True,
        tie_word_embeddings=False,
        attention_dropout=0.0,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).float()
    set_expert_bias(model)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


@torch.no_grad()
def set_expert_bias(model) -> None:
    """An expert bias that changes the choice (HF starts `e_score_correction_bias` at zeros)."""
    for layer in model.model.layers[model.config.first_k_dense_replace :]:
        layer.mlp.gate.e_score_correction_bias.copy_(torch.tensor([0.05, -0.05, 0.02, -0.02]))


@contextlib.contextmanager
def padded_value_sdpa() -> Iterator[None]:
    """Hugging Face's "sdpa" attention with MLA's value head padded to the query / key head (and
    trimmed after), causal, no mask: torch's flash CPU kernel instead of the math fallback that a
    value head of another size takes, about half the fine-tune's time (the same attention to
    fp32 rounding). For the contract fine-tune only, whose rows are right-padded and unmasked."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **_k):
        hv = value.shape[-1]
        value = F.pad(value, (0, query.shape[-1] - hv))
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling)
        return out[..., :hv].transpose(1, 2).contiguous(), None

    saved = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = attention
    try:
        yield
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = saved


def is_mla(model_dir: Path) -> bool:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return cfg.get("model_type") == "deepseek_v3"


def mla_policy(policy: dict[str, Any], *, ep: int = 1) -> dict[str, Any]:
    """The MoE keys of the Moonlight recipes (grpo-moonlight-16ba3b-4n4g-megatron.yaml over
    grpo_math_1B.yaml), CPU-ready: the router frozen, no load-balancing loss, no bias update,
    routing in fp64, the alltoall dispatcher (the 4n4g recipe's; 4n8g's DeepEP `flex` is GPU-only)."""
    policy = dict(policy)
    mc = policy["megatron_cfg"] = dict(policy["megatron_cfg"])
    mc.update(
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=1,
        moe_token_dispatcher_type="alltoall",
        moe_router_load_balancing_type="none",
        moe_router_dtype="fp64",
        moe_router_bias_update_rate=0.0,
        freeze_moe_router=True,
        moe_permute_fusion=False,
        moe_grouped_gemm=False,
        moe_enable_deepep=False,
        moe_shared_expert_overlap=False,
    )
    return policy


class MLAPackedSDPAAttention(ContextParallelSDPAAttention):
    """The packed SDPA attention where the value head differs from the query / key head (MLA):
    the output is [s, b, np * hv]; a packed stream returns TE's THD layout [T, np * hv]
    (Megatron-Core's MLA pads V to the query's head under THD and trims after)."""

    def forward(self, query, key, value, attention_mask, attn_mask_type=None,
                attention_bias=None, packed_seq_params=None):  # fmt: skip
        packed = packed_seq_params is not None
        if packed:
            query, key, value, attention_mask = self.packed_inputs(
                query, key, value, packed_seq_params
            )
        sq, b, np_, _ = query.shape
        if key.shape[2] != np_:
            rep = np_ // key.shape[2]
            key, value = (t.repeat_interleave(rep, dim=2) for t in (key, value))
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, np, s, h]
        mask = None if attention_mask is None else ~attention_mask.bool()
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, scale=self.scale,
            dropout_p=self.dropout if self.training else 0.0,
        )  # fmt: skip
        out = out.permute(2, 0, 1, 3)  # [s, b, np, hv]
        if packed:
            return out.reshape(sq, np_ * out.shape[-1])  # [T, np * hv] (b = 1)
        return out.reshape(sq, b, np_ * out.shape[-1])


class MLACompressedNorm:
    """MLA's q / kv layernorms (torch RMSNorm): they act on the down-projections' outputs, which
    Megatron-Core scatters back to the sequence shard under SP, so each TP rank's gradient covers its
    tokens only: marked `sequence_parallel` as TE's fused layernorm-linear marks its norm, so
    `finalize_model_grads` sums them over TP (by name it catches `q_layernorm`, not `kv_layernorm`)."""

    def __new__(cls, config, hidden_size: int, eps: float = 1e-6, **_unused):
        norm = torch.nn.RMSNorm(hidden_size, eps=eps)
        for p in norm.parameters():
            p.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]
        return norm


def cpu_mla_block_spec(config, *_args, vp_stage=None, **_kwargs):
    """Megatron-Core's local GPT decoder block spec (dense and MoE layers as `moe_layer_freq`
    says, MLA), with the packed SDPA attention and torch norms that run sequence parallel."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    from clipo_testkit.nemo_rl.real_worker.thd_attention import SequenceParallelTorchNorm

    block = get_gpt_decoder_block_spec(
        config, use_transformer_engine=False, normalization=config.normalization, vp_stage=vp_stage
    )
    for spec in {id(s): s for s in block.layer_specs}.values():
        attn = spec.submodules.self_attention.submodules
        attn.core_attention = MLAPackedSDPAAttention
        attn.q_layernorm = attn.kv_layernorm = MLACompressedNorm
        spec.submodules.input_layernorm = SequenceParallelTorchNorm
        spec.submodules.pre_mlp_layernorm = SequenceParallelTorchNorm
    block.layer_norm = SequenceParallelTorchNorm
    return block
