# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CPU reference kernels for Megatron-Core's gated DeltaNet (Qwen3.5 / Qwen3-Next linear attention).

Megatron-Core's `megatron/core/ssm/gated_delta_net` imports three kernels from `fla`
(flash-linear-attention, GPU Triton): `causal_conv1d`, `l2norm`, `chunk_gated_delta_rule`, and
refuses to build `GatedDeltaNet` without them (`common.py`: `HAVE_FLA`). These are plain torch
stand-ins with FLA's signatures as Megatron-Core calls them (`gdn.py` forward, `common.py`
`_prepare_input_for_gated_delta_rule`), packed streams (`cu_seqlens`) included: every segment
runs on its own, from a zero state. fp32 arithmetic, slow, exact; test code only.

`bind_into_megatron()` sets them where Megatron-Core looks them up (the module globals of
`common` and `gdn`, and `HAVE_FLA`) and returns an undo callable.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-6, output_dtype=None) -> torch.Tensor:
    """FLA's `fla.modules.l2norm.l2norm`: x / sqrt(sum(x^2) + eps) over the last dim, in fp32."""
    xf = x.float()
    y = xf * torch.rsqrt((xf * xf).sum(dim=dim, keepdim=True) + eps)
    return y.to(output_dtype or x.dtype)


def _segments(total: int, cu_seqlens: torch.Tensor | None) -> list[tuple[int, int]]:
    if cu_seqlens is None:
        return [(0, total)]
    cu = [int(c) for c in cu_seqlens.detach().cpu().tolist()]
    if cu[0] != 0 or cu[-1] != total:
        raise ValueError(f"cu_seqlens {cu} does not span the packed stream of {total} tokens")
    return list(zip(cu[:-1], cu[1:]))


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    activation: str | None = None,
    cu_seqlens: torch.Tensor | None = None,
    **_unused,
) -> tuple[torch.Tensor, None]:
    """FLA's `fla.modules.convolution.causal_conv1d`: depthwise causal conv over time.
    x [B, T, D], weight [D, W]; each `cu_seqlens` segment (B == 1) is left-padded with zeros on
    its own. activation None / "silu" / "swish". Returns (y [B, T, D], None)."""
    if initial_state is not None or output_final_state:
        raise NotImplementedError("reference causal_conv1d: no conv state (training path only)")
    if cu_seqlens is not None and x.shape[0] != 1:
        raise ValueError("cu_seqlens needs a packed batch of 1")
    d, width = weight.shape
    w = weight.float().unsqueeze(1)  # [D, 1, W]
    b = None if bias is None else bias.float()
    outs = []
    for start, end in _segments(x.shape[1], cu_seqlens):
        seg = x[:, start:end].float().transpose(1, 2)  # [B, D, t]
        y = F.conv1d(F.pad(seg, (width - 1, 0)), w, b, groups=d)
        outs.append(y.transpose(1, 2))
    y = torch.cat(outs, dim=1)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    elif activation is not None:
        raise ValueError(f"activation {activation!r}: FLA's causal_conv1d takes silu / swish")
    if residual is not None:
        y = y + residual.float()
    return y.to(x.dtype), None


def _recurrent(q, k, v, g, beta, state):
    """One segment, [H, t, K] / [H, t, V] / [H, t]: S <- S * exp(g_t);
    S <- S + k_t (beta_t (v_t - S^T k_t))^T; o_t = S^T q_t. Returns (o [H, t, V], S)."""
    outs = []
    for t in range(q.shape[1]):
        state = state * g[:, t].exp()[:, None, None]
        kv = (state * k[:, t, :, None]).sum(dim=1)  # [H, V]
        delta = (v[:, t] - kv) * beta[:, t, None]
        state = state + k[:, t, :, None] * delta[:, None, :]
        outs.append((state * q[:, t, :, None]).sum(dim=1))
    return torch.stack(outs, dim=1), state


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    **_unused,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """FLA's `fla.ops.gated_delta_rule.chunk_gated_delta_rule` (its result, in the recurrent
    form): q, k [B, T, H, K], v [B, T, H, V], g (log decay), beta [B, T, H]; scale 1/sqrt(K)
    unless given. Packed (`cu_seqlens`, B == 1): each segment from its own initial state
    (`initial_state` [N, H, K, V] or zeros). Returns (o [B, T, H, V], final states or None)."""
    dtype = q.dtype
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qf, kf, vf, gf, bf = (t.float().transpose(1, 2) for t in (q, k, v, g, beta))  # [B, H, T, .]
    qf = qf * scale
    if cu_seqlens is not None and q.shape[0] != 1:
        raise ValueError("cu_seqlens needs a packed batch of 1")
    out = torch.empty_like(vf)
    finals = []
    for b in range(q.shape[0]):
        for n, (start, end) in enumerate(_segments(q.shape[1], cu_seqlens)):
            i = n if cu_seqlens is not None else b
            state = (
                qf.new_zeros(q.shape[2], q.shape[3], v.shape[3])
                if initial_state is None
                else initial_state[i].float()
            )
            sl = slice(start, end)
            o, state = _recurrent(
                qf[b, :, sl], kf[b, :, sl], vf[b, :, sl], gf[b, :, sl], bf[b, :, sl], state
            )
            out[b, :, sl] = o
            finals.append(state)
    final = torch.stack(finals) if output_final_state else None
    return out.transpose(1, 2).contiguous().to(dtype), final


def bind_into_megatron() -> Callable[[], None]:
    """Put the three kernels where Megatron-Core's GatedDeltaNet finds FLA's (`common` and `gdn`
    module globals, `HAVE_FLA` True). Returns the undo."""
    import importlib

    names = {
        "causal_conv1d": causal_conv1d,
        "l2norm": l2norm,
        "chunk_gated_delta_rule": chunk_gated_delta_rule,
    }
    saved: list[tuple[object, str, object]] = []
    for mod_name in (
        "megatron.core.ssm.gated_delta_net.common",
        "megatron.core.ssm.gated_delta_net.gdn",
        "megatron.core.ssm.gated_delta_net",
    ):
        mod = importlib.import_module(mod_name)
        values = {**names, "HAVE_FLA": True} if mod_name.endswith("common") else names
        for name, value in values.items():
            if hasattr(mod, name):
                saved.append((mod, name, getattr(mod, name)))
                setattr(mod, name, value)
    # gdn picks its kernel at construction (`self.gated_delta_rule = chunk_gated_delta_rule`),
    # from its own globals, set above

    def undo() -> None:
        for mod, name, value in reversed(saved):
            setattr(mod, name, value)

    return undo
