# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Masked mean pooling (padded [B,S,D] / [S,B,D], packed THD) vs explicit loops."""

from __future__ import annotations

import pytest
import torch

from clipo_megatron.megatron.pooling.masked_mean import (
    masked_mean,
    masked_sum_and_count,
    mean_from_sums,
    packed_segment_ids,
    packed_sum_and_count,
    segment_sum_and_count,
)


def _loop_mean(hidden_bsd, mask):
    out = []
    for b in range(hidden_bsd.shape[0]):
        toks = [hidden_bsd[b, s] for s in range(hidden_bsd.shape[1]) if mask[b, s]]
        out.append(torch.stack(toks).double().mean(0))
    return torch.stack(out)


def _batch(seed=0, b=5, s=11, d=7):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(b, s, d, generator=gen)
    mask = torch.zeros(b, s, dtype=torch.bool)
    for i in range(b):  # prompt of random length, then a response, then padding
        start = int(torch.randint(1, 5, (1,), generator=gen))
        end = int(torch.randint(start + 1, s + 1, (1,), generator=gen))
        mask[i, start:end] = True
    return h, mask


def test_padded_bsd_and_sbd_equal_loop():
    h, mask = _batch()
    ref = _loop_mean(h, mask)
    torch.testing.assert_close(masked_mean(h, mask).double(), ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(
        masked_mean(h.transpose(0, 1).contiguous(), mask, layout="sbd").double(),
        ref,
        rtol=1e-6,
        atol=1e-6,
    )


def test_bf16_hidden_pooled_in_fp32():
    h, mask = _batch(1)
    sums, counts = masked_sum_and_count(h.bfloat16(), mask)
    assert sums.dtype == torch.float32 and counts.dtype == torch.float32
    torch.testing.assert_close(
        mean_from_sums(sums, counts).double(),
        _loop_mean(h.bfloat16().float(), mask),
        rtol=1e-6,
        atol=1e-6,
    )


def test_packed_thd_equals_padded():
    h, mask = _batch(2)
    lengths = mask.shape[1] - torch.arange(
        mask.shape[0]
    )  # pack each row truncated to a different length
    rows, masks = [], []
    for i, n in enumerate(lengths.tolist()):
        rows.append(h[i, :n])
        masks.append(mask[i, :n])
    packed = torch.cat(rows)  # [T, D]
    tmask = torch.cat(masks)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    trunc = mask.clone()
    for i, n in enumerate(lengths.tolist()):
        trunc[i, n:] = False
    sums, counts = packed_sum_and_count(packed.unsqueeze(1), cu, tmask)  # Megatron's [T, 1, D]
    torch.testing.assert_close(
        mean_from_sums(sums, counts).double(), _loop_mean(h, trunc), rtol=1e-6, atol=1e-6
    )


def test_partial_sums_over_shards_equal_full():
    # Sequence split across 3 "ranks": summing partial sums and counts (what an
    # all-reduce of D + 1 floats per sequence does) equals unsharded pooling.
    h, mask = _batch(3, s=12)
    parts = [masked_sum_and_count(hs, ms) for hs, ms in zip(h.split(4, 1), mask.split(4, 1))]
    sums = sum(p[0] for p in parts)
    counts = sum(p[1] for p in parts)
    torch.testing.assert_close(
        mean_from_sums(sums, counts), masked_mean(h, mask), rtol=1e-6, atol=1e-6
    )


def test_segment_ids_and_ignore():
    cu = torch.tensor([0, 3, 3, 7])  # middle sequence empty
    seg = packed_segment_ids(cu)
    assert seg.tolist() == [0, 0, 0, 2, 2, 2, 2]
    h = torch.arange(7.0).unsqueeze(1)
    sums, counts = segment_sum_and_count(h, torch.tensor([0, -1, 0, 2, 2, -1, 2]), 3)
    assert sums.flatten().tolist() == [2.0, 0.0, 13.0]
    assert counts.tolist() == [2.0, 0.0, 3.0]


def test_empty_response_is_an_error():
    h, mask = _batch(4)
    mask[2] = False
    with pytest.raises(ValueError, match=r"empty response\(s\) at rows \[2\]"):
        masked_mean(h, mask)


def test_shape_errors():
    h, mask = _batch(5)
    with pytest.raises(ValueError, match="mask must be"):
        masked_sum_and_count(h, mask[:, :-1])
    with pytest.raises(ValueError, match="3-D"):
        masked_sum_and_count(h[0], mask)
    with pytest.raises(ValueError, match="layout"):
        masked_sum_and_count(h, mask, layout="bds")
    with pytest.raises(ValueError, match="segment_ids must lie"):
        segment_sum_and_count(h[0], torch.tensor([0] * 10 + [5]), 3)
    with pytest.raises(ValueError, match="token_mask"):
        packed_segment_ids(torch.tensor([0, 4]), torch.ones(3))
