# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Llama / Qwen2 (HF transformers) <-> Megatron-Core GPTModel state dicts, TP = PP = 1.

Layout differences handled here:
- Megatron fuses Q, K, V into `linear_qkv`, grouped per KV head: for each of
  the ng query groups, [its np/ng query heads, its key head, its value head],
  each head hn rows. HF keeps q_proj / k_proj / v_proj separate.
- Megatron fuses SwiGLU's gate and up projections into `linear_fc1`
  ([gate; up]); HF keeps gate_proj / up_proj.
- Norms, embeddings, output layer map 1:1 (RoPE is non-interleaved in both).
Megatron-Bridge does this for every model family on GPU; this small
converter is what the CPU default needs (tested against HF logits).
"""

from __future__ import annotations

import torch

from clipo_megatron.models.arch import GPTArch


def arch_from_hf_config(cfg) -> GPTArch:
    rope = getattr(cfg, "rope_theta", None)
    if rope is None:
        rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return GPTArch(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_query_groups=cfg.num_key_value_heads,
        ffn_hidden_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=float(rope),
        norm_eps=cfg.rms_norm_eps,
        tie_embeddings=bool(cfg.tie_word_embeddings),
        qkv_bias=bool(getattr(cfg, "attention_bias", False)) or cfg.model_type == "qwen2",
    )


def _heads(arch: GPTArch):
    hn = arch.hidden_size // arch.num_attention_heads
    return hn, arch.num_attention_heads // arch.num_query_groups, arch.num_query_groups


def hf_to_megatron(hf: dict[str, torch.Tensor], arch: GPTArch) -> dict[str, torch.Tensor]:
    """HF Llama/Qwen2 state dict -> GPTModel state dict (keys of the local/CPU spec)."""
    hn, per, ng = _heads(arch)
    out = {
        "embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
        "decoder.final_layernorm.weight": hf["model.norm.weight"],
    }
    if not arch.tie_embeddings:
        out["output_layer.weight"] = hf["lm_head.weight"]
    for i in range(arch.num_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        q = hf[p + "self_attn.q_proj.weight"].view(ng, per * hn, -1)
        k = hf[p + "self_attn.k_proj.weight"].view(ng, hn, -1)
        v = hf[p + "self_attn.v_proj.weight"].view(ng, hn, -1)
        out[m + "self_attention.linear_qkv.weight"] = torch.cat([q, k, v], 1).reshape(
            -1, arch.hidden_size
        )
        if arch.qkv_bias:
            qb = hf[p + "self_attn.q_proj.bias"].view(ng, per * hn)
            kb = hf[p + "self_attn.k_proj.bias"].view(ng, hn)
            vb = hf[p + "self_attn.v_proj.bias"].view(ng, hn)
            out[m + "self_attention.linear_qkv.bias"] = torch.cat([qb, kb, vb], 1).reshape(-1)
        out[m + "self_attention.linear_proj.weight"] = hf[p + "self_attn.o_proj.weight"]
        out[m + "mlp.linear_fc1.weight"] = torch.cat(
            [hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]], 0
        )
        out[m + "mlp.linear_fc2.weight"] = hf[p + "mlp.down_proj.weight"]
        out[m + "input_layernorm.weight"] = hf[p + "input_layernorm.weight"]
        out[m + "pre_mlp_layernorm.weight"] = hf[p + "post_attention_layernorm.weight"]
    return {k: v.detach().clone().float() for k, v in out.items()}


def megatron_to_hf(mg: dict[str, torch.Tensor], arch: GPTArch) -> dict[str, torch.Tensor]:
    """GPTModel state dict -> HF Llama/Qwen2 state dict (for the generator's weight sync)."""
    hn, per, ng = _heads(arch)
    out = {
        "model.embed_tokens.weight": mg["embedding.word_embeddings.weight"],
        "model.norm.weight": mg["decoder.final_layernorm.weight"],
    }
    out["lm_head.weight"] = (
        mg["embedding.word_embeddings.weight"] if arch.tie_embeddings else mg["output_layer.weight"]
    )
    for i in range(arch.num_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        qkv = mg[m + "self_attention.linear_qkv.weight"].view(ng, (per + 2) * hn, -1)
        q, k, v = qkv.split([per * hn, hn, hn], dim=1)
        out[p + "self_attn.q_proj.weight"] = q.reshape(-1, arch.hidden_size)
        out[p + "self_attn.k_proj.weight"] = k.reshape(-1, arch.hidden_size)
        out[p + "self_attn.v_proj.weight"] = v.reshape(-1, arch.hidden_size)
        if arch.qkv_bias:
            qb, kb, vb = (
                mg[m + "self_attention.linear_qkv.bias"]
                .view(ng, (per + 2) * hn)
                .split([per * hn, hn, hn], 1)
            )
            out[p + "self_attn.q_proj.bias"] = qb.reshape(-1)
            out[p + "self_attn.k_proj.bias"] = kb.reshape(-1)
            out[p + "self_attn.v_proj.bias"] = vb.reshape(-1)
        out[p + "self_attn.o_proj.weight"] = mg[m + "self_attention.linear_proj.weight"]
        gate, up = mg[m + "mlp.linear_fc1.weight"].chunk(2, dim=0)
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate, up
        out[p + "mlp.down_proj.weight"] = mg[m + "mlp.linear_fc2.weight"]
        out[p + "input_layernorm.weight"] = mg[m + "input_layernorm.weight"]
        out[p + "post_attention_layernorm.weight"] = mg[m + "pre_mlp_layernorm.weight"]
    return {k: v.detach() for k, v in out.items()}


def load_megatron_state(model, state: dict[str, torch.Tensor]) -> None:
    """Strict load of a GPTModel's tensors; its `_extra_state` entries (TE metadata) are kept as built."""
    own = model.state_dict()
    want = {k for k in own if not k.endswith("_extra_state")}
    if set(state) != want:
        raise ValueError(
            f"GPTModel state mismatch: missing {sorted(want - set(state))[:5]}, "
            f"unexpected {sorted(set(state) - want)[:5]}"
        )
    model.load_state_dict(
        {**{k: v for k, v in own.items() if k not in state}, **state}, strict=True
    )


def load_megatron_from_hf(model, hf_model, arch: GPTArch) -> None:
    """Copy an HF model's weights into a freshly built GPTModel (strict: every key must match)."""
    load_megatron_state(model, hf_to_megatron(hf_model.state_dict(), arch))


def load_hf_from_megatron(hf_model, megatron_state: dict, arch: GPTArch, what: str) -> None:
    """Load a GPTModel's weights into an HF model; every HF tensor but the rotary buffers must be set."""
    missing, unexpected = hf_model.load_state_dict(
        megatron_to_hf(megatron_state, arch), strict=False
    )
    if unexpected or [k for k in missing if "rotary" not in k]:
        raise ValueError(f"{what}: missing {missing[:5]}, unexpected {unexpected[:5]}")
