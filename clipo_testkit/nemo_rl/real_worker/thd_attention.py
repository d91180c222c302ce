# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The project's CPU layer spec with a core attention that takes packed (THD) streams.

NeMo-RL packs sequences (`policy.sequence_packing`) and hands Megatron-Core a `PackedSeqParams`;
TransformerEngine's fused attention runs each `cu_seqlens_q_padded` slot as its own sequence.
Megatron-Core's local `DotProductAttention` refuses `packed_seq_params`, and so does the project's
`SDPACoreAttention` (cpu_spec.py). This one runs the stream [T, 1, np, hn] with a block-diagonal
causal mask over the slots: each token sees exactly the keys it sees unpacked (RoPE per slot is
Megatron-Core's own THD path). Test code: Bridge serialises the spec into the checkpoint's
run_config.yaml by import path, so it must be importable from the repository root.
"""

from __future__ import annotations

import torch

from clipo_megatron.runner.model.cpu_spec import SDPACoreAttention, get_cpu_gpt_layer_spec


def slot_mask(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """[1, 1, T, T] bool, True = masked: causal within each slot [cu[i], cu[i+1]), nothing across."""
    cu = cu_seqlens.long().to(torch.device("cpu"))
    if int(cu[-1]) != total:
        raise ValueError(f"cu_seqlens ends at {int(cu[-1])}, the packed stream has {total}")
    t = torch.arange(total)
    slot = torch.searchsorted(cu[1:], t, right=True)
    allowed = (slot[:, None] == slot[None, :]) & (t[None, :] <= t[:, None])
    return (~allowed).view(1, 1, total, total)


class PackedSDPAAttention(SDPACoreAttention):
    """SDPACoreAttention + THD: a packed stream is one row with a block-diagonal causal mask
    (the parent's forward runs it; this lays the stream out)."""

    def packed_inputs(self, query, key, value, packed_seq_params):
        if query.dim() == 3:  # [T, np, hn] (THD squeezed): the batch dim of one
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
        cu = packed_seq_params.cu_seqlens_q_padded
        if cu is None:
            cu = packed_seq_params.cu_seqlens_q
        return query, key, value, slot_mask(cu, query.shape[0]).to(query.device)


def cp_positions(cu_seqlens: torch.Tensor, cp: int, cp_rank: int) -> torch.Tensor:
    """[T / cp] the global packed position of each token on CP rank `cp_rank`: NeMo-RL splits
    every slot of `cu_seqlens_q_padded` into 2 * cp chunks and gives rank r chunks r and
    2 * cp - 1 - r, in that order (`_get_tokens_on_this_cp_rank`)."""
    from clipo_megatron.megatron.pooling.sharded import cp_chunk_positions

    cu = cu_seqlens.long().to(torch.device("cpu")).tolist()
    return torch.cat(
        [
            cp_chunk_positions(end - start, cp, cp_rank) + start
            for start, end in zip(cu[:-1], cu[1:])
        ]
    )


def cp_slot_mask(cu_seqlens: torch.Tensor, cp: int, cp_rank: int) -> torch.Tensor:
    """[1, 1, T / cp, T] bool, True = masked: this rank's queries against every rank's keys in
    the order the CP all-gather stacks them (rank-major), causal within a slot on global positions
    (softmax does not care about the keys' order, only the mask does)."""
    cu = cu_seqlens.long().to(torch.device("cpu"))
    q = cp_positions(cu, cp, cp_rank)
    k = torch.cat([cp_positions(cu, cp, r) for r in range(cp)])
    q_slot = torch.searchsorted(cu[1:], q, right=True)
    k_slot = torch.searchsorted(cu[1:], k, right=True)
    allowed = (q_slot[:, None] == k_slot[None, :]) & (k[None, :] <= q[:, None])
    return (~allowed).view(1, 1, len(q), len(k))


class ContextParallelSDPAAttention(PackedSDPAAttention):
    """The packed attention under CP, standing in for TransformerEngine's (Megatron-Core's local
    attention asserts CP = 1): every rank all-gathers K / V over the CP group (the backward
    reduce-scatters their gradients, as TE's all-gather CP does) and masks its own queries on the
    global positions NeMo-RL's zigzag split gave them."""

    context_parallel = True

    def __init__(self, config, *args, pg_collection=None, **kwargs):
        super().__init__(config, *args, pg_collection=pg_collection, **kwargs)
        self.cp_group = getattr(pg_collection, "cp", None)

    def packed_inputs(self, query, key, value, packed_seq_params):
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region

        group = self.cp_group or parallel_state.get_context_parallel_group()
        cp = group.size()
        if cp == 1:
            return super().packed_inputs(query, key, value, packed_seq_params)
        if query.dim() == 3:  # [T / cp, np, hn] (THD squeezed)
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
        key, value = (  # [T, 1, ng, hn], rank-major
            gather_from_sequence_parallel_region(t, True, group=group) for t in (key, value)
        )
        cu = packed_seq_params.cu_seqlens_q_padded
        if cu is None:
            cu = packed_seq_params.cu_seqlens_q
        mask = cp_slot_mask(cu, cp, group.rank())
        if mask.shape[2:] != (query.shape[0], key.shape[0]):
            raise ValueError(f"CP mask {tuple(mask.shape)} does not fit q {tuple(query.shape)}")
        return query, key, value, mask.to(query.device)


class SequenceParallelTorchNorm:
    """torch's RMSNorm / LayerNorm where the model runs sequence parallel, as TransformerEngine's
    TENorm behaves there (Megatron-Core's `WrappedTorchNorm` refuses SP; TE is GPU-only): a norm is
    per token, so each TP rank normalises its own slice of the sequence, and the weight is marked
    `sequence_parallel` so Megatron-Core's `finalize_model_grads` sums its gradient over TP."""

    def __new__(cls, config, hidden_size: int, eps: float = 1e-5, **_unused):
        kind = torch.nn.RMSNorm if config.normalization == "RMSNorm" else torch.nn.LayerNorm
        norm = kind(hidden_size, eps=eps)
        for p in norm.parameters():
            p.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]
        return norm


def cpu_thd_layer_spec(config=None, *_args, **_kwargs):
    """Megatron-Core's local GPT layer spec with the packed-capable SDPA attention and norms that
    run sequence parallel (a provider's `transformer_layer_spec` callable: Bridge calls it with the
    provider's config; an MoE config gets `moe_model.cpu_moe_layer_spec`, an MLA one
    `mla_model.cpu_mla_block_spec`). The block's final
    norm: `cpu_patches` (`sp_block_norm`)."""
    if getattr(config, "multi_latent_attention", False):  # DeepSeek-V3 / Moonlight (MLA)
        from clipo_testkit.nemo_rl.real_worker.mla_model import cpu_mla_block_spec

        return cpu_mla_block_spec(config)
    if getattr(config, "softmax_type", "vanilla") != "vanilla" or getattr(
        config, "window_size", None
    ):  # gpt-oss: sinks and sliding windows
        from clipo_testkit.nemo_rl.real_worker.gptoss_model import cpu_gptoss_layer_spec

        return cpu_gptoss_layer_spec(config)
    if getattr(config, "num_moe_experts", None):
        from clipo_testkit.nemo_rl.real_worker.moe_model import cpu_moe_layer_spec

        return cpu_moe_layer_spec(config)
    spec = get_cpu_gpt_layer_spec(core_attention=ContextParallelSDPAAttention)
    spec.submodules.input_layernorm = SequenceParallelTorchNorm
    spec.submodules.pre_mlp_layernorm = SequenceParallelTorchNorm
    return spec
