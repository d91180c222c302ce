# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The HF generator receives the Megatron policy's weights: after a sync both give the same logits."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")

from clipo_megatron.generation.hf_backend import HFGenerator  # noqa: E402
from clipo_megatron.models.hf_convert import arch_from_hf_config, load_megatron_from_hf  # noqa: E402
from clipo_megatron.runner.model.model_builder import build_gpt_model, transformer_config  # noqa: E402
from clipo_testkit.tiny_models import tiny_hf_config, tiny_hf_model  # noqa: E402

pytestmark = [pytest.mark.mcore, pytest.mark.runner]


def _logits_hf(hf, ids):
    return hf(ids).logits  # [B, S, V]


def _logits_mg(mg, ids):
    s = ids.shape[1]
    pos = torch.arange(s).expand_as(ids)
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1).view(1, 1, s, s)
    return mg(ids, pos, mask)  # [B, S, V]


def test_sync_from_megatron_moves_generator_to_policy_weights(mcore_single_process):
    hf = tiny_hf_model(tiny_hf_config(vocab_size=97))
    arch = arch_from_hf_config(hf.config)
    mg = build_gpt_model(arch, transformer_config(arch)).eval()
    load_megatron_from_hf(mg, hf, arch)
    gen = HFGenerator(hf, tokenizer=None, arch=arch)
    ids = torch.randint(0, 97, (2, 11))
    with torch.no_grad():
        for p in mg.parameters():  # a "policy update": every Megatron weight moves
            p.add_(0.05 * torch.randn_like(p))
        stale = _logits_hf(gen.model, ids)
        want = _logits_mg(mg, ids)
        assert (stale - want).abs().max() > 1e-2  # before the sync the generator is behind
        gen.sync_from_megatron(mg.state_dict())
        # fp32, SDPA vs eager attention: same tolerance as the conversion test.
        torch.testing.assert_close(_logits_hf(gen.model, ids), want, rtol=1e-5, atol=1e-5)
