# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""TP shard layouts of a GPTModel state dict (hand-checked), the round trip, and bad TP sizes."""

from __future__ import annotations

import pytest
import torch

from clipo_megatron.runner.model.tp_state import check_divisible, layout, shard, unshard
from clipo_testkit.tiny_models import SMOLLM2_135M_ARCH


def test_gated_fc1_shards_gate_and_up_separately():
    full = torch.arange(8.0).view(8, 1)  # rows 0-3 gate, 4-7 up
    assert shard("decoder.layers.0.mlp.linear_fc1.weight", full, 0, 2).view(-1).tolist() == [
        0,
        1,
        4,
        5,
    ]
    assert shard("decoder.layers.0.mlp.linear_fc1.weight", full, 1, 2).view(-1).tolist() == [
        2,
        3,
        6,
        7,
    ]


def test_row_column_replicated_layouts():
    w = torch.arange(12.0).view(3, 4)
    assert shard("decoder.layers.1.mlp.linear_fc2.weight", w, 1, 2).tolist() == [
        [2, 3],
        [6, 7],
        [10, 11],
    ]
    assert shard("embedding.word_embeddings.weight", torch.arange(6.0).view(6, 1), 2, 3).view(
        -1
    ).tolist() == [4, 5]
    assert torch.equal(shard("decoder.final_layernorm.weight", w, 1, 2), w)
    assert layout("decoder.layers.0.self_attention.linear_qkv.bias") == "column"
    with pytest.raises(ValueError, match="no tensor-parallel layout known"):
        layout("decoder.layers.0.mystery.weight")


@pytest.mark.parametrize("size", [1, 2, 4])
@pytest.mark.parametrize(
    "name",
    [
        "decoder.layers.0.mlp.linear_fc1.weight",
        "decoder.layers.0.mlp.linear_fc2.weight",
        "decoder.layers.0.self_attention.linear_qkv.weight",
        "output_layer.weight",
        "decoder.layers.0.input_layernorm.weight",
    ],
)
def test_round_trip_is_exact(name, size):
    full = torch.randn(16, 8)
    assert torch.equal(unshard(name, [shard(name, full, r, size) for r in range(size)]), full)


def test_tp_sizes_that_do_not_fit_are_named():
    smollm2 = SMOLLM2_135M_ARCH
    check_divisible(smollm2, 3)
    with pytest.raises(
        ValueError, match="parallel.tp=2 does not divide the model's num_attention_heads=9"
    ):
        check_divisible(smollm2, 2)
    with pytest.raises(
        ValueError, match="parallel.tp=9 does not divide the model's num_query_groups=3"
    ):
        check_divisible(smollm2, 9)
