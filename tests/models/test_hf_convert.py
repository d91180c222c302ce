# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""HF Llama / Qwen2 -> Megatron GPTModel: same logits; and the round trip back."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")

from clipo_megatron.models.hf_convert import (  # noqa: E402
    arch_from_hf_config,
    load_megatron_from_hf,
    megatron_to_hf,
)
from clipo_megatron.runner.model.model_builder import build_gpt_model, transformer_config  # noqa: E402
from clipo_testkit.tiny_models import tiny_hf_config, tiny_hf_model  # noqa: E402

pytestmark = [pytest.mark.mcore, pytest.mark.runner]


@pytest.mark.parametrize("family,tied", [("llama", True), ("llama", False), ("qwen2", True)])
def test_logits_match_hf(mcore_single_process, family, tied):
    hf = tiny_hf_model(tiny_hf_config(family, vocab_size=101, tied=tied))
    if family == "qwen2":
        with torch.no_grad():  # non-zero QKV biases so the bias mapping is exercised
            for layer in hf.model.layers:
                for proj in (
                    layer.self_attn.q_proj,
                    layer.self_attn.k_proj,
                    layer.self_attn.v_proj,
                ):
                    proj.bias.normal_(0, 0.1)
    arch = arch_from_hf_config(hf.config)
    mg = build_gpt_model(arch, transformer_config(arch)).eval()
    load_megatron_from_hf(mg, hf, arch)
    ids = torch.randint(0, 101, (3, 17))
    pos = torch.arange(17).expand_as(ids)
    mask = torch.triu(torch.ones(17, 17, dtype=torch.bool), 1).view(1, 1, 17, 17)
    with torch.no_grad():
        ref = hf(ids).logits
        out = mg(ids, pos, mask)
    # fp32, different kernels (SDPA vs eager, fused QKV): 1e-5 absolute on logits of size ~1.
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    back = megatron_to_hf(mg.state_dict(), arch)
    for k, v in hf.state_dict().items():
        if k in back:
            torch.testing.assert_close(back[k], v, rtol=0, atol=0)
