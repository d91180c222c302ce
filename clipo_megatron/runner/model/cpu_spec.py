# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A CPU layer spec for Megatron-Core's GPTModel (tests and the single-machine run).

The stock local `DotProductAttention` and TransformerEngine attention assume
CUDA. On CPU we swap only the core attention for torch SDPA; everything else
(column/row-parallel linears, norms, MLP, RoPE, the GPTModel itself) is
Megatron-Core's own, so TP over gloo exercises the real sharded code. GPU
users keep the TransformerEngine / local specs: nothing here is imported on
that path.
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.spec_utils import ModuleSpec


def _tp_size(pg_collection) -> int:
    if pg_collection is not None and getattr(pg_collection, "tp", None) is not None:
        return pg_collection.tp.size()
    from clipo_megatron.megatron.parallel import tensor_parallel_world_size

    return tensor_parallel_world_size()


class SDPACoreAttention(MegatronModule):
    """Causal (or masked) attention with torch SDPA, GQA-aware, in Megatron's layout.

    query [sq, b, np, hn], key/value [sk, b, ng, hn] -> context [sq, b, np * hn].
    Megatron's boolean masks mark *masked-out* positions (True = drop).
    `context_parallel`: whether the class runs CP > 1 (this one does not; a subclass that
    gathers keys and values over the CP group says so).
    """

    context_parallel = False

    def __init__(
        self,
        config,
        layer_number,
        attn_mask_type,
        attention_type=None,
        attention_dropout=None,
        softmax_scale=None,
        cp_comm_type=None,
        pg_collection=None,
        **_unused,
    ):
        super().__init__(config=config)
        tp = _tp_size(pg_collection)
        if config.context_parallel_size > 1 and not self.context_parallel:
            raise ValueError(
                f"{type(self).__name__} does not implement context parallelism; use CP=1 on CPU"
            )
        self.heads = config.num_attention_heads // tp
        self.groups = (config.num_query_groups or config.num_attention_heads) // tp
        head_dim = config.kv_channels
        self.scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(
        self,
        query,
        key,
        value,
        attention_mask,
        attn_mask_type=None,
        attention_bias=None,
        packed_seq_params=None,
    ):
        if packed_seq_params is not None:
            query, key, value, attention_mask = self.packed_inputs(
                query, key, value, packed_seq_params
            )
        sq, b, np_, hn = query.shape
        if self.groups != np_:
            rep = np_ // key.shape[2]
            key = key.repeat_interleave(rep, dim=2)  # [sk, b, np, hn]
            value = value.repeat_interleave(rep, dim=2)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, np, s, hn]
        if attention_mask is None:
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                is_causal=True,
                scale=self.scale,
                dropout_p=self.dropout if self.training else 0.0,
            )
        else:
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=~attention_mask.bool(),
                scale=self.scale,
                dropout_p=self.dropout if self.training else 0.0,
            )
        return out.permute(2, 0, 1, 3).reshape(sq, b, np_ * hn)  # [sq, b, np * hn]

    def packed_inputs(self, query, key, value, packed_seq_params):
        """(query, key, value, mask) laid out for `forward` from a packed (THD) stream: refused
        here; a subclass that runs packed streams (the NeMo-RL real-worker tests') overrides
        this alone and keeps this class's forward."""
        raise ValueError("SDPACoreAttention does not support packed (THD) sequences")


def get_cpu_gpt_layer_spec(
    normalization: str = "RMSNorm", core_attention: type = SDPACoreAttention
) -> ModuleSpec:
    """Megatron-Core's local GPT layer spec with SDPA core attention (or a subclass of it)."""
    spec = get_gpt_layer_local_spec(normalization=normalization)
    spec.submodules.self_attention.submodules.core_attention = core_attention
    return spec
