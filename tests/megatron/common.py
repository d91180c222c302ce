# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Tiny model, batch and reference computations shared by the Megatron tests."""

from __future__ import annotations

import torch

from clipo_megatron.core import CLIPOConfig
from clipo_megatron.megatron.pooling.masked_mean import masked_sum_and_count, mean_from_sums
from clipo_testkit.tiny_models import TINY_ARCH as ARCH

CFG = CLIPOConfig(embed_dim=16, temperature=0.1)
SEQ = 16


def batch(groups: int = 4, rollouts: int = 4, seed: int = 0):
    """Token ids [B, S], response mask [B, S], correctness, group ids, sample ids."""
    gen = torch.Generator().manual_seed(seed)
    b = groups * rollouts
    ids = torch.randint(0, ARCH.vocab_size, (b, SEQ), generator=gen)
    mask = torch.zeros(b, SEQ, dtype=torch.bool)
    for i in range(b):
        start = 4 + int(torch.randint(0, 3, (1,), generator=gen))
        end = start + 2 + int(torch.randint(0, SEQ - start - 2, (1,), generator=gen))
        mask[i, start:end] = True
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0][:b])
    gids = torch.arange(groups).repeat_interleave(rollouts) * 10 + 3
    sids = torch.arange(b) + 100
    return ids, mask, correct, gids, sids


def causal_mask(s: int) -> torch.Tensor:
    """Megatron's boolean mask: True = masked out. [1, 1, S, S]."""
    return torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1).view(1, 1, s, s)


def forward_and_pool(model, mask: torch.Tensor, *args, **kwargs):
    """One forward with the drivers' capture path (MicrobatchPooler on the final norm);
    returns (the forward's output, pooled means [B, D]). Rows ride as `clipo_sample_idx`."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import (
        SAMPLE_IDX_KEY,
        MicrobatchPooler,
        find_final_norm,
    )

    pooler = MicrobatchPooler()
    meta = {SAMPLE_IDX_KEY: torch.arange(mask.shape[0]), "token_mask": mask}
    with pooler.hooked(find_final_norm(model)):
        for _ in pooler.tee([meta]):
            out = model(*args, **kwargs)
    rows, pooled = pooler.result()
    assert rows.tolist() == list(range(mask.shape[0]))
    return out, pooled


def reference_mean(hidden_sbd: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return mean_from_sums(*masked_sum_and_count(hidden_sbd, mask, layout="sbd"))
