# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The CPU reference kernels of `clipo_testkit.gdn_reference` (FLA's three, as Megatron-Core's
GatedDeltaNet calls them) against Hugging Face Qwen3.5's own torch path, fp32, random inputs:
`l2norm`, the depthwise causal conv (HF: `nn.Conv1d` + silu, `Qwen3_5GatedDeltaNet.forward`),
the gated delta rule (HF: `torch_chunk_gated_delta_rule`, chunk 64, over more than one chunk),
and packed streams (`cu_seqlens`) against the same rows run one by one through HF. Then the binding
into Megatron-Core's `gated_delta_net` namespace, and its undo.

What the stand-ins hide: FLA's Triton kernels themselves (their chunked bf16 arithmetic and
numerics) are not run; these kernels compute the same function in fp32.
"""

from __future__ import annotations

import pytest
import torch

from clipo_testkit import gdn_reference as ref

pytestmark = [pytest.mark.nemo_rl]

TOL = 1e-5


def _hf():
    try:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as hf
    except ImportError as e:  # pragma: no cover - wrong environment
        pytest.skip(f"Hugging Face Qwen3.5 (transformers >= 5) does not import here ({e})")
    return hf


def _gates(t: int, h: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    g = -torch.nn.functional.softplus(torch.randn(1, t, h, generator=gen)) * 0.5
    beta = torch.rand(1, t, h, generator=gen)
    return g, beta


def test_l2norm_matches_hf():
    hf = _hf()
    x = torch.randn(2, 37, 4, 16) * 3
    err = (ref.l2norm(x) - hf.l2norm(x, dim=-1, eps=1e-6)).abs().max().item()
    print(f"[gdn] l2norm max |ref - hf| = {err:.3g}")
    assert err < TOL


def test_causal_conv1d_matches_hf_conv():
    torch.manual_seed(1)
    d, w, t = 24, 4, 29
    conv = torch.nn.Conv1d(d, d, kernel_size=w, groups=d, padding=w - 1, bias=False)
    x = torch.randn(2, t, d)
    hf_out = torch.nn.functional.silu(conv(x.transpose(1, 2))[:, :, :t]).transpose(1, 2)
    out, _ = ref.causal_conv1d(x, conv.weight.squeeze(1), None, activation="silu")
    err = (out - hf_out).abs().max().item()
    print(f"[gdn] causal_conv1d max |ref - hf| = {err:.3g}")
    assert err < TOL
    # packed: each segment alone, from zeros
    lens = [5, 17, 7]
    cu = torch.tensor([0, 5, 22, 29])
    packed, _ = ref.causal_conv1d(x[:1], conv.weight.squeeze(1), activation="silu", cu_seqlens=cu)
    rows = torch.split(x[:1], lens, dim=1)
    alone = [torch.nn.functional.silu(conv(r.transpose(1, 2))[:, :, : r.shape[1]]) for r in rows]
    err_p = (packed - torch.cat(alone, dim=2).transpose(1, 2)).abs().max().item()
    print(f"[gdn] causal_conv1d packed max |ref - hf| = {err_p:.3g}")
    assert err_p < TOL


@pytest.mark.parametrize("l2_in_kernel", [True, False])
def test_gated_delta_rule_matches_hf_chunked(l2_in_kernel):
    hf = _hf()
    torch.manual_seed(2)
    t, h, k, v = 150, 4, 16, 8  # 3 chunks of 64 in HF's chunked form
    q, kk = torch.randn(2, t, h, k), torch.randn(2, t, h, k)
    if not l2_in_kernel:  # Megatron-Core normalises before the kernel (use_qk_l2norm)
        q, kk = hf.l2norm(q), hf.l2norm(kk)
    val = torch.randn(2, t, h, v)
    g, beta = (torch.cat([a, b]) for a, b in zip(_gates(t, h, 3), _gates(t, h, 4)))
    want, want_s = hf.torch_chunk_gated_delta_rule(
        q, kk, val, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=l2_in_kernel
    )
    got, got_s = ref.chunk_gated_delta_rule(
        q, kk, val, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=l2_in_kernel
    )
    err, err_s = (got - want).abs().max().item(), (got_s - want_s).abs().max().item()
    print(f"[gdn] gated delta rule max |ref - hf| = {err:.3g} (final state {err_s:.3g})")
    assert err < TOL and err_s < TOL


def test_gated_delta_rule_packed_is_rows_alone():
    hf = _hf()
    torch.manual_seed(5)
    lens, h, k, v = [70, 9, 40], 2, 8, 8
    t = sum(lens)
    q, kk, val = torch.randn(1, t, h, k), torch.randn(1, t, h, k), torch.randn(1, t, h, v)
    g, beta = _gates(t, h, 6)
    cu = torch.tensor([0, 70, 79, 119])
    got, _ = ref.chunk_gated_delta_rule(
        q, kk, val, g, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu
    )
    parts = [torch.split(x, lens, dim=1) for x in (q, kk, val, g, beta)]
    want = torch.cat(
        [
            hf.torch_chunk_gated_delta_rule(
                *row[:3], g=row[3], beta=row[4], use_qk_l2norm_in_kernel=True
            )[0]
            for row in zip(*parts)
        ],
        dim=1,
    )
    err = (got - want).abs().max().item()
    print(f"[gdn] gated delta rule packed max |ref - hf rows| = {err:.3g}")
    assert err < TOL


def test_bound_into_megatron_core_namespace():
    try:
        from megatron.core.ssm.gated_delta_net import common, gdn
    except ImportError as e:  # pragma: no cover - wrong environment
        pytest.skip(f"Megatron-Core with ssm.gated_delta_net does not import here ({e})")
    before = (common.HAVE_FLA, gdn.chunk_gated_delta_rule, gdn.causal_conv1d, common.l2norm)
    undo = ref.bind_into_megatron()
    try:
        assert common.HAVE_FLA is True
        assert gdn.chunk_gated_delta_rule is ref.chunk_gated_delta_rule
        assert gdn.causal_conv1d is ref.causal_conv1d
        assert gdn.l2norm is ref.l2norm and common.l2norm is ref.l2norm
    finally:
        undo()
    after = (common.HAVE_FLA, gdn.chunk_gated_delta_rule, gdn.causal_conv1d, common.l2norm)
    assert after == before
