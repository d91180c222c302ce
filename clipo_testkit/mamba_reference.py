# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CPU torch references for the kernels Megatron-Core's `MambaMixer` binds at module level.

`megatron.core.ssm.mamba_mixer` imports `causal_conv1d_fn` / `causal_conv1d_update` (the
causal-conv1d package), `RMSNorm as RMSNormGated`, `mamba_chunk_scan_combined` and
`mamba_split_conv1d_scan_combined` (mamba_ssm's Triton kernels); without them the names are
None or a MagicMock, and a Nemotron-H (HybridModel) cannot run on a machine without CUDA. These
are plain-torch stand-ins with the kernels' signatures, written from the Mamba-2 paper's SSD
"minimal" chunked scan (Dao & Gu 2024, Listing 1), for tests to bind into the mixer's namespace
(`clipo_testkit.mamba_binding.bind_into`). They are checked against Hugging Face NemotronH's own torch path
(`NemotronHMamba2Mixer.torch_forward`, `Zamba2RMSNormGated`) in
tests/nemo_rl/real_worker/test_mamba_reference.py. Packed rows (`seq_idx`, [b, l]) are exact:
each run of one sequence is scanned from a zero state and the conv taps never cross it.

Layouts (as the kernels): x [b, l, h, p], dt [b, l, h], A [h], B/C [b, l, g, n], z like x;
conv input [b, d, l] and weight [d, w].
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def _act(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    if activation in ("silu", "swish"):
        return F.silu(y)
    if activation is None:
        return y
    raise ValueError(
        f"causal_conv1d: activation {activation!r} is not one of None, 'silu', 'swish'"
    )


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: torch.Tensor | None = None,
    activation: str | None = None,
) -> Any:
    """Depthwise causal conv: out[:, c, t] = act(bias[c] + sum_k weight[c, k] x[:, c, t - (w-1) + k]).

    x [b, d, l], weight [d, w]; with seq_idx [b, l] a tap from another sequence counts as zero.
    """
    if initial_states is not None or return_final_states or final_states_out is not None:
        raise NotImplementedError("causal_conv1d_fn reference: no initial/final conv states")
    b, d, seqlen = x.shape
    w = weight.shape[-1]
    xf = x.float()
    out = torch.zeros(b, d, seqlen, dtype=torch.float32, device=x.device)  # [b, d, l]
    for k in range(w):
        shift = w - 1 - k  # this tap reads x[t - shift]
        tap = F.pad(xf, (shift, 0))[..., :seqlen]  # [b, d, l]
        if seq_idx is not None and shift:
            same = seq_idx == F.pad(seq_idx, (shift, 0), value=-1)[..., :seqlen]  # [b, l]
            tap = tap * same[:, None, :]
        out = out + weight[:, k].float()[None, :, None] * tap
    if bias is not None:
        out = out + bias.float()[None, :, None]
    return _act(out, activation).to(x.dtype)


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    cache_seqlens: torch.Tensor | None = None,
    conv_state_indices: torch.Tensor | None = None,
) -> torch.Tensor:
    """One decode step per token: x [b, d] or [b, d, l]; conv_state [b, d, w] updated in place."""
    if cache_seqlens is not None or conv_state_indices is not None:
        raise NotImplementedError("causal_conv1d_update reference: no cache_seqlens / indices")
    squeeze = x.dim() == 2
    xs = x[..., None] if squeeze else x  # [b, d, l]
    outs = []
    for t in range(xs.shape[-1]):
        conv_state.copy_(torch.cat([conv_state[..., 1:], xs[..., t : t + 1]], dim=-1))
        y = (conv_state.float() * weight.float()[None]).sum(-1)  # [b, d]
        if bias is not None:
            y = y + bias.float()
        outs.append(_act(y, activation).to(x.dtype))
    out = torch.stack(outs, dim=-1)
    return out[..., 0] if squeeze else out


def _segsum(a: torch.Tensor) -> torch.Tensor:
    """[..., T] -> [..., T, T]: out[i, j] = a[j+1] + ... + a[i] for j <= i, -inf above."""
    t = a.shape[-1]
    rep = a[..., None].expand(*a.shape, t)  # [..., T(i), T(j)] holding a[i]
    below = torch.tril(torch.ones(t, t, dtype=torch.bool, device=a.device), diagonal=-1)
    seg = torch.cumsum(rep.masked_fill(~below, 0), dim=-2)
    keep = torch.tril(torch.ones(t, t, dtype=torch.bool, device=a.device), diagonal=0)
    return seg.masked_fill(~keep, -math.inf)


def ssd_minimal(
    xdt: torch.Tensor, adt: torch.Tensor, b: torch.Tensor, c: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """SSD minimal chunked scan from a zero state (Dao & Gu 2024, Listing 1), fp32.

    xdt [b, l, h, p] (x * dt), adt [b, l, h] (A * dt), b/c [b, l, h, n]; returns y [b, l, h, p]
    and the final state [b, h, p, n].
    """
    bsz, seqlen, h, p = xdt.shape
    pad = (-seqlen) % chunk
    xs, As, Bs, Cs = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (xdt, adt, b, c))
    nc = (seqlen + pad) // chunk
    xs = xs.reshape(bsz, nc, chunk, h, p)  # [b, c, l, h, p]
    Bs = Bs.reshape(bsz, nc, chunk, h, -1)  # [b, c, l, h, n]
    Cs = Cs.reshape(bsz, nc, chunk, h, -1)
    As = As.reshape(bsz, nc, chunk, h).permute(0, 3, 1, 2)  # [b, h, c, l]
    a_cum = torch.cumsum(As, dim=-1)
    decay = torch.exp(_segsum(As))  # [b, h, c, l, s]
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cs, Bs, decay, xs)
    decay_states = torch.exp(a_cum[..., -1:] - a_cum)  # [b, h, c, l]
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bs, decay_states, xs)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)  # [b, c+1, h, p, n]
    decay_chunk = torch.exp(_segsum(F.pad(a_cum[..., -1], (1, 0))))  # [b, h, c+1, c+1]
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final = new_states[:, :-1], new_states[:, -1]
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cs, states, torch.exp(a_cum))
    y = (y_diag + y_off).reshape(bsz, nc * chunk, h, p)[:, :seqlen]
    return y, final


def _segments(seq_idx: torch.Tensor | None, row: int, seqlen: int) -> list[tuple[int, int]]:
    if seq_idx is None:
        return [(0, seqlen)]
    ids = seq_idx[row].tolist()
    starts = [0] + [t for t in range(1, seqlen) if ids[t] != ids[t - 1]]
    return list(zip(starts, starts[1:] + [seqlen], strict=True))


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    return_varlen_states: bool = False,
    state_dtype: torch.dtype | None = None,
) -> Any:
    """y = SSD(x, dt, A, B, C) + D x, times silu(z) when z is given; mamba_ssm's signature."""
    if initial_states is not None or cu_seqlens is not None or return_varlen_states:
        raise NotImplementedError("mamba_chunk_scan_combined reference: no initial/varlen states")
    bsz, seqlen, h, p = x.shape
    dtf = dt.float() + (dt_bias.float() if dt_bias is not None else 0.0)  # [b, l, h]
    if dt_softplus:
        dtf = F.softplus(dtf)
    dtf = dtf.clamp(min=dt_limit[0], max=dt_limit[1])
    rep = h // B.shape[2]
    Bh = B.float().repeat_interleave(rep, dim=2)  # [b, l, h, n]
    Ch = C.float().repeat_interleave(rep, dim=2)
    xdt = x.float() * dtf[..., None]
    adt = A.float()[None, None] * dtf  # [b, l, h]
    y = torch.zeros(bsz, seqlen, h, p, dtype=torch.float32, device=x.device)
    final = torch.zeros(bsz, h, p, B.shape[-1], dtype=torch.float32, device=x.device)
    for r in range(bsz):
        for s, e in _segments(seq_idx, r, seqlen):
            ys, fs = ssd_minimal(
                xdt[r : r + 1, s:e],
                adt[r : r + 1, s:e],
                Bh[r : r + 1, s:e],
                Ch[r : r + 1, s:e],
                chunk_size,
            )
            y[r, s:e], final[r] = ys[0], fs[0]
    if D is not None:
        y = y + x.float() * (D.float()[:, None] if D.dim() == 1 else D.float())
    if z is not None:
        y = y * F.silu(z.float())
    out = y.to(x.dtype)
    return (out, final.to(state_dtype or x.dtype)) if return_final_states else out


def rmsnorm_gated(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor | None,
    eps: float,
    group_size: int | None,
    norm_before_gate: bool,
) -> torch.Tensor:
    """Grouped RMSNorm with a SiLU gate: before or after the norm, as mamba_ssm's `rmsnorm_fn`."""
    xf = x.float()
    if z is not None and not norm_before_gate:
        xf = xf * F.silu(z.float())
    g = group_size or xf.shape[-1]
    grouped = xf.reshape(*xf.shape[:-1], xf.shape[-1] // g, g)
    out = (grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)).reshape(xf.shape)
    out = out * weight.float()
    if z is not None and norm_before_gate:
        out = out * F.silu(z.float())
    return out.to(x.dtype)


class RMSNormGated(nn.Module):
    """mamba_ssm.ops.triton.layernorm_gated.RMSNorm's constructor and forward(x, z=None)."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-5,
        group_size: int | None = None,
        norm_before_gate: bool = True,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.eps, self.group_size, self.norm_before_gate = eps, group_size, norm_before_gate
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        return rmsnorm_gated(x, self.weight, z, self.eps, self.group_size, self.norm_before_gate)


def mamba_split_conv1d_scan_combined(
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: torch.Tensor | None,
    dt_bias: torch.Tensor,
    A: torch.Tensor,
    D: torch.Tensor,
    chunk_size: int,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    activation: str = "silu",
    rmsnorm_weight: torch.Tensor | None = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: torch.Tensor | None = None,
    outproj_bias: torch.Tensor | None = None,
    headdim: int | None = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
    state_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """zxbcdt [b, l, z|xBC|dt] -> conv + SiLU, SSD, gate (or gated norm), out proj: [b, l, d]."""
    if initial_states is not None or return_final_states:
        raise NotImplementedError("mamba_split_conv1d_scan_combined reference: no states")
    if D.dim() == 1:
        if headdim is None:
            raise ValueError("mamba_split_conv1d_scan_combined: D is [h], so headdim is needed")
        nheads = D.shape[0]
    else:
        nheads, headdim = D.shape
    dim = nheads * headdim
    dstate = (zxbcdt.shape[-1] - 2 * dim - nheads) // ngroups // 2
    z, xbc, dt = torch.split(zxbcdt, [dim, dim + 2 * ngroups * dstate, nheads], dim=-1)
    xbc = causal_conv1d_fn(
        xbc.transpose(1, 2), conv1d_weight, conv1d_bias, seq_idx, activation=activation
    )
    x, B, C = torch.split(xbc.transpose(1, 2), [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    bsz, seqlen = x.shape[:2]
    z4 = z.reshape(bsz, seqlen, nheads, headdim)
    y = mamba_chunk_scan_combined(
        x.reshape(bsz, seqlen, nheads, headdim),
        dt,
        A,
        B.reshape(bsz, seqlen, ngroups, dstate),
        C.reshape(bsz, seqlen, ngroups, dstate),
        chunk_size,
        D=D,
        z=z4 if rmsnorm_weight is None else None,
        dt_bias=dt_bias,
        seq_idx=seq_idx,
        dt_softplus=True,
        dt_limit=dt_limit,
    ).reshape(bsz, seqlen, dim)
    if rmsnorm_weight is not None:
        y = rmsnorm_gated(y, rmsnorm_weight, z, rmsnorm_eps, dim // ngroups, norm_before_gate)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return y
