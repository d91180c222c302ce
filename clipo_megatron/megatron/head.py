# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO's contrastive head as a Megatron-Core module built from a ModuleSpec.

e = normalise(W h), W: D -> d without bias (paper Sec. 3.2), or the
Linear(D, D)-ReLU-Linear(D, d) `mlp` variant. In `tensor_parallel` mode W is
a ColumnParallelLinear sharded along d: each TP rank returns its slice of
the (unnormalised) embedding, and the loss completes the Gram and norms with
one TP all-reduce (`sum_reduce`). In replicated mode every rank holds all of
W. Both give the same numbers (tested).

The head lives on the post-process (last pipeline) stage next to the
GPTModel. `attach_head` hangs it on the model as a plain attribute, *not* a
registered submodule: it is trained by its own optimizer, and it must never
appear in the policy's parameters, state_dict, HF export or vLLM refit.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from megatron.core.tensor_parallel.layers import ColumnParallelLinear
from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.spec_utils import ModuleSpec, build_module

from clipo_megatron.core.contrastive_loss import l2_normalize
from clipo_megatron.megatron.parallel import group_rank, group_size


@dataclass
class ContrastiveHeadSubmodules:
    """The projection layer class: nn.Linear (replicated) or ColumnParallelLinear (TP)."""

    linear: type = torch.nn.Linear


def get_contrastive_head_spec(tensor_parallel: bool = False) -> ModuleSpec:
    linear = ColumnParallelLinear if tensor_parallel else torch.nn.Linear
    return ModuleSpec(module=ContrastiveHead, submodules=ContrastiveHeadSubmodules(linear=linear))


def shards_output(linear: type) -> bool:
    """Whether the spec's projection shards d over TP: Megatron-Core's ColumnParallelLinear or a
    subclass does, torch.nn.Linear or a subclass is replicated. Any other class (e.g.
    TransformerEngine's, whose constructor differs) is refused rather than guessed."""
    if isinstance(linear, type) and issubclass(linear, ColumnParallelLinear):
        return True
    if isinstance(linear, type) and issubclass(linear, torch.nn.Linear):
        return False
    raise ValueError(
        f"the contrastive head's linear {getattr(linear, '__qualname__', linear)!r} is neither "
        "Megatron-Core's ColumnParallelLinear (a TP-sharded head) nor torch.nn.Linear (a "
        "replicated one), or a subclass of either; build the head spec with "
        "get_contrastive_head_spec(tensor_parallel=...)"
    )


class ContrastiveHead(MegatronModule):
    """Projection D -> d of pooled response hidden states to contrastive embeddings."""

    def __init__(
        self,
        config,
        submodules: ContrastiveHeadSubmodules,
        *,
        input_size: int,
        embed_dim: int,
        head_type: str = "linear",
        tp_group=None,
    ):
        super().__init__(config=config)
        self.tp_group = tp_group
        self.tensor_parallel = shards_output(submodules.linear)
        tp = group_size(tp_group) if self.tensor_parallel else 1
        if embed_dim % tp:
            raise ValueError(
                f"embed_dim={embed_dim} must be divisible by the TP size {tp} for a sharded head"
            )
        if head_type not in ("linear", "mlp"):
            raise ValueError(f"head_type={head_type!r} must be 'linear' or 'mlp'")
        if head_type == "mlp" and self.tensor_parallel:
            raise ValueError(
                "the mlp head is replicated-only; use head_type='linear' with a TP-sharded head"
            )
        self.embed_dim = embed_dim
        self.hidden = None
        if head_type == "mlp":
            self.hidden = torch.nn.Sequential(
                torch.nn.Linear(input_size, input_size, bias=False), torch.nn.ReLU()
            )
        if self.tensor_parallel:
            self.proj = build_module(
                submodules.linear,
                input_size,
                embed_dim,
                config=config,
                init_method=config.init_method,
                bias=False,
                gather_output=False,
                skip_bias_add=True,
                tp_group=tp_group,
            )
        else:
            self.proj = build_module(submodules.linear, input_size, embed_dim, bias=False)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """pooled [B, D] (constants) -> embeddings [B, d] (replicated, L2-normalised) or [B, d/tp] (TP shard, raw)."""
        x = pooled.to(self.proj.weight.dtype)
        if self.hidden is not None:
            x = self.hidden(x)
        if self.tensor_parallel:
            out, _ = self.proj(x)  # [B, d/tp]
            return out
        return l2_normalize(self.proj(x))  # [B, d]

    @property
    def sum_reduce(self):
        """The Gram all-reduce the loss needs for a sharded head (None when replicated)."""
        if not self.tensor_parallel or group_size(self.tp_group) == 1:
            return None
        group = self.tp_group
        return lambda t: reduce_from_tensor_model_parallel_region(t, group=group)


def head_config(model_config):
    """The head's TransformerConfig: the policy's, minus what does not apply to a [B, D] head.

    - fp32 parameters: the head trains in fp32 with its own AdamW whatever the policy's dtype;
    - no sequence parallelism: the head's input is one pooled row per rollout, not a shard of
      a sequence; with it a ColumnParallelLinear all-gathers its input along dim 0 and returns
      [tp * B, d / tp];
    - no gradient-accumulation fusion: it writes `weight.main_grad`, which only Megatron's DDP
      wrapper creates, and the head is not wrapped;
    """
    cfg = copy.copy(model_config)
    cfg.params_dtype = torch.float32
    cfg.bf16 = False
    cfg.fp16 = False
    cfg.sequence_parallel = False
    cfg.gradient_accumulation_fusion = False
    return cfg


def build_contrastive_head(
    config,
    *,
    input_size: int,
    embed_dim: int,
    head_type: str = "linear",
    tensor_parallel: bool = False,
    tp_group=None,
    spec: ModuleSpec | None = None,
):
    """config: the policy's TransformerConfig (adapted by `head_config`, in one place for every
    driver).

    The weights come from the caller's RNG, drawn as the replicated head draws them, whatever the
    TP size: a TP-sharded head takes its rows of the full W a replicated `nn.Linear` would get
    (Megatron's own init of a parallel linear draws per TP rank, so a run at TP 2 would start from
    another head than the same run at TP 1)."""
    full = None
    if tensor_parallel and head_type == "linear":
        full = torch.nn.Linear(input_size, embed_dim, bias=False).weight.detach()  # [d, D]
    spec = spec or get_contrastive_head_spec(tensor_parallel)
    head = build_module(
        spec,
        config=head_config(config),
        input_size=input_size,
        embed_dim=embed_dim,
        head_type=head_type,
        tp_group=tp_group,
    )
    if full is not None and getattr(head, "tensor_parallel", False):
        rows = full.chunk(group_size(tp_group), 0)[group_rank(tp_group)]  # [d / tp, D]
        with torch.no_grad():
            head.proj.weight.copy_(rows)
    return head


def attach_head(model, head) -> None:
    """Hang the head on the post-process stage's model without registering it."""
    if not getattr(model, "post_process", True):
        raise ValueError("the contrastive head belongs on the post-process (last pipeline) stage")
    object.__setattr__(model, "clipo_head", head)
