# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""TransformerEngine's modules as CPU ones, for specs Megatron-Core / Megatron-Bridge build from TE
only (the Qwen3.5 language block and the ViT: `qwen35_model`). Test code.

- `CpuNorm`: TENorm (RMSNorm / LayerNorm, Megatron-Core's `layernorm_zero_centered_gamma`);
- `CpuLayerNormColumnParallelLinear`: TELayerNormColumnParallelLinear (TE's parameter names);
- `CpuBackend`: Megatron-Core's BackendSpecProvider protocol with these (TESpecProvider's choices;
  MoE experts as SequentialMLP);
- `cpu_spec`: every TE class left in a spec tree swapped for its CPU module.
Core attention: `thd_attention.ContextParallelSDPAAttention` (causal, packed-capable).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch


class CpuNorm:
    """TENorm on CPU: RMSNorm / LayerNorm over the last dim, with Megatron-Core's
    `layernorm_zero_centered_gamma` (y = norm(x) * (1 + w)), which Qwen3.5's norms are."""

    def __new__(cls, config, hidden_size: int, eps: float = 1e-5, **_unused):
        return _Norm(config, hidden_size, eps)


class _Norm(torch.nn.Module):
    def __init__(self, config, hidden_size: int, eps: float):
        super().__init__()
        self.rms = config.normalization == "RMSNorm"
        self.zero_centered = bool(config.layernorm_zero_centered_gamma)
        self.eps = eps
        self.weight = torch.nn.Parameter(
            torch.zeros(hidden_size) if self.zero_centered else torch.ones(hidden_size)
        )
        self.bias = None if self.rms else torch.nn.Parameter(torch.zeros(hidden_size))
        for p in self.parameters():
            p.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return norm(x, self.weight, self.bias, self.eps, self.rms, self.zero_centered)


def norm(x, weight, bias, eps: float, rms: bool, zero_centered: bool) -> torch.Tensor:
    xf = x.float()
    if rms:
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    else:
        y = torch.nn.functional.layer_norm(xf, (x.shape[-1],), eps=eps)
    w = weight.float() + 1 if zero_centered else weight.float()
    y = y * w
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def column_parallel_linear():
    from megatron.core.tensor_parallel import ColumnParallelLinear

    return ColumnParallelLinear


class CpuLayerNormColumnParallelLinear:
    """TELayerNormColumnParallelLinear on CPU: the norm (`layer_norm_weight` / `_bias`, TE's
    names, which Bridge's mappings address) on this rank's tokens, then Megatron-Core's
    ColumnParallelLinear (its SP gather). The class name holds "LayerNormColumnParallelLinear",
    which Bridge's AutoMapping reads as fused (norm weights replicated, the rest column)."""

    _cls: type | None = None

    def __new__(cls, input_size: int, output_size: int, *, config, **kwargs):
        if cls._cls is None:
            cls._cls = _make_ln_linear(column_parallel_linear())
        return cls._cls(input_size, output_size, config=config, **kwargs)


def _make_ln_linear(base: type) -> type:
    class LayerNormColumnParallelLinear(base):
        def __init__(self, input_size: int, output_size: int, *, config, **kwargs):
            kwargs.pop("eps", None)
            kwargs.pop("normalization", None)
            super().__init__(input_size, output_size, config=config, **kwargs)
            self.rms = config.normalization == "RMSNorm"
            self.zero_centered = bool(config.layernorm_zero_centered_gamma)
            self.ln_eps = config.layernorm_epsilon
            init = torch.zeros if self.zero_centered else torch.ones
            self.layer_norm_weight = torch.nn.Parameter(init(input_size))
            self.layer_norm_bias = None if self.rms else torch.nn.Parameter(torch.zeros(input_size))
            for p in (self.layer_norm_weight, self.layer_norm_bias):
                if p is not None:
                    p.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]

        def forward(self, x, *args, **kwargs):
            y = norm(
                x, self.layer_norm_weight, self.layer_norm_bias, self.ln_eps, self.rms,
                self.zero_centered,
            )  # fmt: skip
            return super().forward(y, *args, **kwargs)

    return LayerNormColumnParallelLinear


def core_attention() -> type:
    from clipo_testkit.nemo_rl.real_worker.thd_attention import ContextParallelSDPAAttention

    return ContextParallelSDPAAttention


class CpuBackend:
    """Megatron-Core's BackendSpecProvider protocol (`models/backends.py`) with the CPU modules:
    what TESpecProvider returns, TE-free."""

    def linear(self) -> type:
        return column_parallel_linear()

    def column_parallel_linear(self) -> type:
        return column_parallel_linear()

    def row_parallel_linear(self) -> type:
        from megatron.core.tensor_parallel import RowParallelLinear

        return RowParallelLinear

    def fuse_layernorm_and_linear(self) -> bool:
        return True

    def column_parallel_layer_norm_linear(self) -> type:
        return CpuLayerNormColumnParallelLinear

    def layer_norm(self, rms_norm: bool = False, for_qk: bool = False, has_residual=False):
        return CpuNorm

    def core_attention(self) -> type:
        return core_attention()

    def grouped_mlp_modules(self, moe_use_grouped_gemm: bool):
        """The routed experts as Megatron-Core's SequentialMLP (LocalSpecProvider's): grouped
        GEMM is TE's / CUTLASS's, GPU-only (`moe_grouped_gemm: false`, cpu_patches)."""
        from megatron.core.models.backends import LocalSpecProvider

        if moe_use_grouped_gemm:
            raise NotImplementedError("grouped GEMM is GPU-only: set moe_grouped_gemm false")
        return LocalSpecProvider().grouped_mlp_modules(False)

    def activation_func(self):
        return None


def _te_swaps() -> dict[type, type]:
    from megatron.core.extensions import transformer_engine as te
    from megatron.core.tensor_parallel import RowParallelLinear

    return {
        te.TELayerNormColumnParallelLinear: CpuLayerNormColumnParallelLinear,
        te.TEColumnParallelLinear: column_parallel_linear(),
        te.TERowParallelLinear: RowParallelLinear,
        te.TENorm: CpuNorm,
        te.TEDotProductAttention: core_attention(),
    }


def cpu_spec(spec: Any, swaps: dict[type, type] | None = None) -> Any:
    """Every TE class in a spec tree (ModuleSpec, submodule dataclasses, lists) swapped for its
    CPU module, in place; returns the spec."""
    from megatron.core.transformer.spec_utils import ModuleSpec

    swaps = _te_swaps() if swaps is None else swaps

    by_id = {id(k): v for k, v in swaps.items()}  # without TE the TE "classes" are MagicMocks

    def swap(value: Any) -> Any:
        if id(value) in by_id:
            return by_id[id(value)]
        if isinstance(value, type):
            return value
        if isinstance(value, functools.partial):  # `MLP.as_mlp_submodule` with its submodules
            kwargs = {k: swap(v) for k, v in value.keywords.items()}
            return functools.partial(value.func, *value.args, **kwargs)
        if isinstance(value, ModuleSpec):
            value.module = swap(value.module)
            if value.submodules is not None:
                value.submodules = swap(value.submodules)
            return value
        if isinstance(value, list):
            return [swap(v) for v in value]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                setattr(value, f.name, swap(getattr(value, f.name)))
        return value

    return swap(spec)
