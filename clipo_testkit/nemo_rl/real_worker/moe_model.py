# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A tiny mixture-of-experts policy for NeMo-RL's real worker on CPU, and the MoE keys of the
recipes that run expert parallelism (NeMo-RL's grpo_math_qwen30ba3b_megatron.yaml and its
recipes/llm/grpo-qwen3-30ba3b-8n8g-megatron.yaml, grpo-moonlight-16ba3b-4n8g-megatron.yaml).

The model is a Qwen3-MoE (the family of the Qwen3-30B-A3B recipes): 4 routed experts, top-2, the
router's load-balancing loss on, imported by Bridge's AutoBridge from a local directory, as the
dense Llama is. `shared=True` writes the variant with a shared expert: an ERNIE 4.5 MoE (Bridge's
`ernie_45_bridge.py` maps `SequentialMLP`'s `local_experts` and the `shared_experts`; GLM-4.5's
maps the routed experts of TE's grouped GEMM only), every layer MoE, one shared expert. Bridge's
ERNIE provider routes by sigmoid scores with an expert bias (DeepSeek-V3's router, which the
Moonlight / GLM / DeepSeek recipes run); the bias stays at its imported zeros
(`moe_router_bias_update_rate: 0`, as `moe_policy` sets it for both).

What stands in on CPU (each checked, not assumed; the test module's docstring holds the record):
- experts: Megatron-Core's `SequentialMLP` (`moe_grouped_gemm` off): grouped GEMM is
  TransformerEngine's / CUTLASS's, GPU-only;
- `moe_permute_fusion` off (a TE kernel);
- the token dispatcher: the recipes' `alltoall` (Megatron-Core's `all_to_all_single` over the EP
  group, which gloo implements); the Moonlight recipe's `flex` (DeepEP) is GPU-only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

EXPERTS, TOP_K = 4, 2
AUX_LOSS_COEFF = 1e-2  # the router's load-balancing loss, on (NeMo-RL's default recipe sets "none")
# Bridge's Qwen3-MoE provider sets its own 1e-3 over the HF config's value; the
# recipe's `model_overrides` (NeMo-RL's first-class route to a provider field) sets ours


def tiny_moe_model(path: Path, *, shared: bool = False, hidden: int = 64, seed: int = 0) -> Path:
    """A random tiny MoE causal LM + the project's character tokenizer, saved for AutoBridge."""
    import transformers

    from clipo_testkit.tiny_models import char_tokenizer

    if (path / "config.json").exists():
        return path
    tok = char_tokenizer()
    common = dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        moe_intermediate_size=32,
        num_experts_per_tok=TOP_K,
    )
    config: Any  # ERNIE's or Qwen3-MoE's HF config
    if shared:
        config = transformers.Ernie4_5_MoeConfig(
            **common,
            intermediate_size=2 * hidden,
            moe_num_experts=EXPERTS,
            moe_num_shared_experts=1,
            moe_layer_start_index=0,  # every layer MoE: the one CPU layer spec serves all
            moe_layer_interval=1,
            router_aux_loss_coef=AUX_LOSS_COEFF,
            use_bias=False,
            # HF's ERNIE has no attention dropout and its config no key for it, so Bridge's
            # provider kept Megatron's default 0.1 (a random training step); written here, Bridge
            # maps it (model_bridge.py CONFIG_MAPPING: attention_dropout), as Qwen3-MoE's 0.0
            attention_dropout=0.0,  # type: ignore[call-arg]
        )
    else:
        config = transformers.Qwen3MoeConfig(
            **common,
            intermediate_size=2 * hidden,
            num_experts=EXPERTS,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            router_aux_loss_coef=AUX_LOSS_COEFF,
            norm_topk_prob=True,
        )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).float()
    if shared:  # HF's ERNIE starts its router at zeros: every score ties and top-2 picks experts
        # 0 and 1 for every token (EP rank 1 idle); drawn as Qwen3-MoE's is, N(0, init range)
        with torch.no_grad():
            for layer in model.model.layers:
                layer.mlp.gate.weight.normal_(0.0, config.initializer_range)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


def is_moe(model_dir: Path) -> bool:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    # transformers 5 writes Qwen3-MoE's `num_experts` as `num_local_experts`; ERNIE's moe_num_experts
    keys = ("num_experts", "num_local_experts", "moe_num_experts")
    # NemotronH always writes n_routed_experts: MoE when its layer pattern holds an "E" layer
    hybrid_moe = "moe" in (cfg.get("layers_block_type") or []) or "E" in str(
        cfg.get("hybrid_override_pattern") or ""
    )
    return any(cfg.get(k) for k in keys) or (cfg.get("model_type") == "nemotron_h" and hybrid_moe)


def moe_policy(policy: dict[str, Any], *, ep: int, dispatcher: str = "alltoall") -> dict[str, Any]:
    """The recipes' MoE keys under policy.megatron_cfg (NeMo-RL's `_apply_moe_config` hands them to
    the model's TransformerConfig), CPU-ready: EP `ep`, expert TP 1 (as the Qwen3-30B-A3B recipe
    sets it beside TP 2), the router's aux loss on, the router trained (not frozen)."""
    policy = dict(policy)
    mc = policy["megatron_cfg"] = dict(policy["megatron_cfg"])
    mc.update(
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=1,
        moe_token_dispatcher_type=dispatcher,
        moe_router_load_balancing_type="aux_loss",
        moe_router_dtype="fp64",  # NeMo-RL's default recipe (stability of the routing)
        moe_router_bias_update_rate=0.0,
        moe_permute_fusion=False,  # TE kernel
        moe_grouped_gemm=False,  # SequentialMLP: grouped GEMM is GPU-only
        moe_enable_deepep=False,
        moe_shared_expert_overlap=False,
        freeze_moe_router=False,  # the aux loss acts on the router
        model_overrides={**(mc.get("model_overrides") or {}), "moe_aux_loss_coeff": AUX_LOSS_COEFF},
    )
    return policy


class TorchQKNorm:
    """Q / K layernorm as torch's RMSNorm over the head dim (TE's TENorm is GPU-only; Megatron-
    Core's `WrappedTorchNorm` refuses SP, which Q / K norms do not care about: they act per head on
    the gathered sequence). Megatron-Core's `finalize_model_grads` sums their gradients over TP by
    name (`q_layernorm` / `k_layernorm` with `qk_layernorm` on)."""

    def __new__(cls, config, hidden_size: int, eps: float = 1e-6, **_unused):
        return torch.nn.RMSNorm(hidden_size, eps=eps)


def cpu_moe_layer_spec(config):
    """Megatron-Core's local GPT layer spec with an MoE MLP (SequentialMLP experts, a shared
    expert where the config has one), the packed SDPA attention and the SP-capable norms of
    `thd_attention`."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    from clipo_testkit.nemo_rl.real_worker.thd_attention import (
        ContextParallelSDPAAttention,
        SequenceParallelTorchNorm,
    )

    spec = get_gpt_layer_local_spec(
        num_experts=config.num_moe_experts,
        moe_grouped_gemm=False,
        qk_layernorm=bool(config.qk_layernorm),
        normalization=config.normalization,
    )
    attn = spec.submodules.self_attention.submodules
    attn.core_attention = ContextParallelSDPAAttention
    if config.qk_layernorm:
        attn.q_layernorm = attn.k_layernorm = TorchQKNorm
    spec.submodules.input_layernorm = SequenceParallelTorchNorm
    spec.submodules.pre_mlp_layernorm = SequenceParallelTorchNorm
    return spec


def expert_weights(worker) -> dict[str, torch.Tensor]:
    """Every router, routed-expert and shared-expert weight this rank holds, keyed by the global
    expert index ("layer0.expert3.linear_fc1", "layer0.shared.linear_fc1"), so EP ranks' shards
    line up with the EP 1 run's. The shared expert is TP-sharded (not expert-TP): its full weight,
    gathered over the TP group (a concatenation: exact), is compared, the same on every TP rank."""
    from megatron.core.utils import unwrap_model

    out: dict[str, torch.Tensor] = {}
    chunks = unwrap_model(list(worker.model) if isinstance(worker.model, list) else [worker.model])
    for chunk in chunks:
        for layer in chunk.decoder.layers:
            mlp, n = layer.mlp, layer.layer_number - 1
            if not hasattr(mlp, "router"):  # a dense layer
                continue
            out[f"layer{n}.router"] = mlp.router.weight.detach().cpu().float().clone()
            for local, glob in enumerate(mlp.local_expert_indices):
                expert = mlp.experts.local_experts[local]
                for name in ("linear_fc1", "linear_fc2"):
                    w = getattr(expert, name).weight.detach().cpu().float().clone()
                    out[f"layer{n}.expert{glob}.{name}"] = w
            if getattr(mlp, "shared_experts", None) is not None:
                for name in ("linear_fc1", "linear_fc2"):
                    w = getattr(mlp.shared_experts, name).weight.detach().cpu().float()
                    out[f"layer{n}.shared.{name}"] = _tp_gathered(w, name)
    return out


def _tp_gathered(shard: torch.Tensor, name: str) -> torch.Tensor:
    """The full weight of a TP-sharded gated MLP: fc1 column-parallel, each rank [gate_r; up_r]
    (Bridge's GatedMLPMapping splits gate and up alike), fc2 row-parallel."""
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    size = torch.distributed.get_world_size(group)
    if size == 1:
        return shard.clone()
    parts = [torch.empty_like(shard) for _ in range(size)]
    torch.distributed.all_gather(parts, shard.contiguous(), group=group)
    if name == "linear_fc2":
        return torch.cat(parts, dim=1)
    halves = [p.chunk(2, dim=0) for p in parts]
    return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)


def has_shared_expert(model_dir: Path) -> bool:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return bool(cfg.get("moe_num_shared_experts"))
