# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A tiny gpt-oss for NeMo-RL's real worker on CPU, and the CPU attention it needs.

gpt-oss (Bridge's `gpt_oss/gpt_oss_bridge.py`) sets `softmax_type: "learnable"` (a per-head sink
logit, `core_attention.softmax_offset`, HF's `self_attn.sinks`), `window_size: (W - 1, 0)` with
`window_attn_skip_freq: 2` (layers 1, 3, ... sliding, 2, 4, ... full: HF's `layer_types`), YaRN
RoPE, biases on every linear, the router included, and experts with a clamped quick-GELU GLU and a
+1 on the linear half. Megatron-Core runs sinks and windows on packed (THD) input only in
TransformerEngine's attention (GPU-only; its local `DotProductAttention` refuses
`packed_seq_params`). `SinkWindowAttention` stands in: the project's packed SDPA attention
(`thd_attention.py`) with the sink column and the window written out, checked against Hugging
Face's own eager attention (`test_gptoss.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from megatron.core.tensor_parallel import RowParallelLinear

from clipo_testkit.nemo_rl.real_worker.thd_attention import ContextParallelSDPAAttention, slot_mask

EXPERTS, TOP_K, SLIDING_WINDOW = 4, 2, 6


def tiny_gptoss_model(path: Path, *, hidden: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """A random tiny gpt-oss (4 experts, top-2, window 6, alternating sliding / full layers) + the
    project's character tokenizer, saved for AutoBridge. The sinks, the router and every bias are
    drawn non-zero (HF initialises sinks and router at zero: a missing sink would not show), every
    weight a bf16 value (below)."""
    import transformers

    from clipo_testkit.tiny_models import char_tokenizer

    if (path / "config.json").exists():
        return path
    tok = char_tokenizer()
    config = transformers.GptOssConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=48,  # 2I != H: Bridge tells gate_up_proj's orientation by shape
        head_dim=16,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        sliding_window=SLIDING_WINDOW,
        max_position_embeddings=131072,
        router_aux_loss_coef=0.0,
        attention_dropout=0.0,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    config._attn_implementation = "eager"  # the sinks' reference path
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM(config).float()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 1.0)
            layer.mlp.router.weight.normal_(0.0, 0.3)
            layer.mlp.router.bias.normal_(0.0, 0.1)
            for name in ("gate_up_proj_bias", "down_proj_bias"):
                getattr(layer.mlp.experts, name).normal_(0.0, 0.02)
        # Bridge's gpt-oss provider imports in bf16 (gpt_oss_bridge.py: `params_dtype =
        # torch.bfloat16`), so NeMo-RL's HF -> Megatron checkpoint rounds every weight to bf16:
        # weights that bf16 holds exactly keep the fp32 comparison with HF exact
        for p in model.parameters():
            p.copy_(p.bfloat16().float())
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


def is_gptoss(model_dir: Path) -> bool:
    return json.loads((Path(model_dir) / "config.json").read_text()).get("model_type") == "gpt_oss"


def _distance(sq: int, sk: int) -> torch.Tensor:
    """[sq, sk] i - j: how far key j lies before query i (the queries are the last sq keys)."""
    return torch.arange(sq)[:, None] + (sk - sq) - torch.arange(sk)[None, :]


def window_mask(sq: int, sk: int, left: int) -> torch.Tensor:
    """[sq, sk] bool, True = masked: key j more than `left` positions before query i (i - j >
    left); Megatron-Core's window (left, 0), HF's `sliding_window` W as left = W - 1."""
    return _distance(sq, sk) > left


class SinkWindowAttention(ContextParallelSDPAAttention):
    """The packed SDPA attention with gpt-oss's learnable softmax sinks and sliding window.

    softmax_offset [np]: one logit per head in the softmax's denominator, no value (Megatron-Core's
    `DotProductAttention` with `softmax_type: learnable`, the name Bridge maps HF's `sinks` to).
    The window applies where Megatron-Core's `is_layer_window_attention` says; on a packed stream
    the stream's index difference is the position difference inside a slot (the slot mask keeps
    slots apart). CP 1 only with a window (the CP mask's positions are not windowed here)."""

    def __init__(self, config, layer_number, *args, pg_collection=None, **kwargs):
        super().__init__(config, layer_number, *args, pg_collection=pg_collection, **kwargs)
        self.tp_group = getattr(pg_collection, "tp", None)
        from megatron.core.transformer.utils import is_layer_window_attention

        window = is_layer_window_attention(
            config.window_size, config.window_attn_skip_freq, layer_number
        )
        self.window_left = int(config.window_size[0]) if window else None
        if window and (config.window_size[1] != 0 or config.context_parallel_size > 1):
            raise ValueError(f"window {config.window_size} at CP {config.context_parallel_size}")
        self.softmax_offset: torch.nn.Parameter | None = None
        if config.softmax_type == "learnable":
            self.softmax_offset = torch.nn.Parameter(torch.zeros(self.heads))
            # split by head over TP: counted on every TP rank in the grad norm, never all-reduced
            from megatron.core.tensor_parallel import set_tensor_model_parallel_attributes

            set_tensor_model_parallel_attributes(self.softmax_offset, True, 0, 1)
        elif config.softmax_type != "vanilla":
            raise ValueError(f"softmax_type {config.softmax_type!r} is not implemented on CPU")

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
        sk = key.shape[0]
        if key.shape[2] != np_:
            key = key.repeat_interleave(np_ // key.shape[2], dim=2)
            value = value.repeat_interleave(np_ // value.shape[2], dim=2)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, np, s, hn]
        if attention_mask is None:  # causal
            masked = _distance(sq, sk) < 0
        else:
            masked = attention_mask.bool().to(torch.device("cpu"))
        if self.window_left is not None:
            masked = masked | window_mask(sq, sk, self.window_left)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        scores = scores.masked_fill(masked.to(scores.device), float("-inf"))
        if self.softmax_offset is not None:
            sink = self.softmax_offset.to(scores.dtype).view(1, np_, 1, 1).expand(b, np_, sq, 1)
            scores = torch.cat([scores, sink], dim=-1)
        probs = torch.softmax(scores, dim=-1)
        if self.softmax_offset is not None:
            probs = probs[..., :-1]  # the sink takes its share and gives no value
        if self.training and self.dropout:
            probs = torch.nn.functional.dropout(probs, p=self.dropout)
        out = torch.matmul(probs.to(v.dtype), v)
        return out.permute(2, 0, 1, 3).reshape(sq, b, np_ * hn)

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        """The sink sharded over TP by head (Megatron-Core's DotProductAttention's)."""
        from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

        state = self.state_dict(prefix="", keep_vars=True)
        return make_sharded_tensors_for_checkpoint(
            state,
            prefix,
            {"softmax_offset": 0},
            sharded_offsets,
            tp_group=self.tp_group,
            dp_cp_group=(metadata or {}).get("dp_cp_group"),
        )


class ExpertRowParallelLinear(RowParallelLinear):
    """Megatron-Core's RowParallelLinear whose output is a tensor of its own (a clone), for the
    experts' fc2 (registered with Bridge as a row-parallel module in `cpu_gptoss_layer_spec`).

    With biased experts Megatron-Core's `MLP.forward` adds the weighted bias in place
    (`transformer/mlp.py:353`, `output += output_bias... * per_token_scale...`) to what
    RowParallelLinear returns; at expert TP 1 that is its input handed through
    `_ReduceFromModelParallelRegion` as-is, a custom Function's view, and autograd refuses the
    in-place add in `train` ("Output 0 of _ReduceFromModelParallelRegion is a view and is being
    modified inplace"). GPU runs take TE's grouped GEMM (`TEGroupedMLP`), not this path."""

    def forward(self, *args, **kwargs):
        out, bias = super().forward(*args, **kwargs)
        return out.clone(), bias


def _submodules(spec):
    """A spec's submodules: a ModuleSpec's, or a `functools.partial(Module, submodules=...)`'s
    (Megatron-Core's MoE specs at this pin)."""
    return spec.submodules if hasattr(spec, "submodules") else spec.keywords["submodules"]


def cpu_gptoss_layer_spec(config):
    """`moe_model.cpu_moe_layer_spec` (SequentialMLP experts, SP-capable norms) with the sink /
    window attention, registered with Bridge's weight mapping as column-parallel (the sink splits
    by head over TP, as Bridge registers Megatron-Core's attention classes; its public hook)."""
    from megatron.bridge.models.conversion.param_mapping import AutoMapping

    from clipo_testkit.nemo_rl.real_worker.moe_model import cpu_moe_layer_spec

    AutoMapping.register_module_type("SinkWindowAttention", "column")
    AutoMapping.register_module_type("ExpertRowParallelLinear", "row")

    spec = cpu_moe_layer_spec(config)
    spec.submodules.self_attention.submodules.core_attention = SinkWindowAttention
    _submodules(_submodules(spec.submodules.mlp).experts).linear_fc2 = ExpertRowParallelLinear
    return spec


__all__ = [
    "ExpertRowParallelLinear",
    "SinkWindowAttention",
    "cpu_gptoss_layer_spec",
    "slot_mask",
    "tiny_gptoss_model",
]
