# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The capture finds the final norm of each model class NeMo-RL's Megatron worker builds, and a
model it cannot capture is refused in one line naming its class.

Real Megatron-Core classes on CPU: GPTModel (the CPU spec), and Megatron-Core's hybrid model
(`HybridModel`, or `MambaModel` on releases before it; what Bridge builds for Nemotron-H and
Nemotron 3) with attention layers only and a torch RMSNorm where Megatron-Core hard-codes
TransformerEngine's `TENorm` for the final norm. What that stand-in hides: the Mamba mixer's
kernels (the hybrid family's own case in tests/nemo_rl/real_worker runs them) and TE's norm
kernel. The vision-language wrapper is a torch module holding a real GPTModel as
`language_model` with a `decoder` property onto it, as Bridge's `Qwen3VLModel` does.
"""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("megatron.core")

from clipo_megatron.megatron.pooling.final_norm import (  # noqa: E402
    FinalNormNotFound,
    find_final_norm,
    require_final_norm,
)
from clipo_megatron.runner.model.model_builder import build_gpt_model, transformer_config  # noqa: E402

from .common import ARCH, SEQ, batch, causal_mask, forward_and_pool, reference_mean  # noqa: E402

pytestmark = pytest.mark.mcore


def _hybrid_classes():
    """(model class, the module whose `TENorm` builds the final norm): HybridModel where this
    Megatron-Core has it, else MambaModel (its older name, same stack with `final_norm`)."""
    try:
        model = importlib.import_module("megatron.core.models.hybrid.hybrid_model").HybridModel
        return model, importlib.import_module("megatron.core.models.hybrid.hybrid_block")
    except ImportError:
        model = importlib.import_module("megatron.core.models.mamba.mamba_model").MambaModel
        return model, importlib.import_module("megatron.core.ssm.mamba_block")


def _torch_rmsnorm(config, hidden_size, eps=1e-5):
    return torch.nn.RMSNorm(hidden_size, eps=eps)


def _hybrid_model(monkeypatch, *, post_process=True):
    from megatron.core.transformer.spec_utils import ModuleSpec

    from clipo_megatron.runner.model.cpu_spec import get_cpu_gpt_layer_spec

    model_cls, block = _hybrid_classes()
    monkeypatch.setattr(block, "TENorm", _torch_rmsnorm)
    stack_cls = block.HybridStack if hasattr(block, "HybridStack") else block.MambaStack
    subs_cls = (
        block.HybridStackSubmodules
        if hasattr(block, "HybridStackSubmodules")
        else block.MambaStackSubmodules
    )
    spec = ModuleSpec(
        module=stack_cls, submodules=subs_cls(attention_layer=get_cpu_gpt_layer_spec())
    )
    kw = {"hybrid_stack_spec" if "HybridModel" in model_cls.__name__ else "mamba_stack_spec": spec}
    torch.manual_seed(0)
    return model_cls(
        config=transformer_config(ARCH),
        vocab_size=ARCH.vocab_size,
        max_sequence_length=ARCH.max_position_embeddings,
        hybrid_override_pattern="**",  # two attention layers: no Mamba kernel needed here
        pre_process=True,
        post_process=post_process,
        position_embedding_type="rope",
        **kw,
    ).eval()


class VisionLanguageWrapper(torch.nn.Module):
    """Megatron-Core's LLaVAModel's shape: the text model as `language_model`, nothing else."""

    def __init__(self, language_model):
        super().__init__()
        self.vision_model = torch.nn.Linear(2, 2)
        self.language_model = language_model
        self.post_process = language_model.post_process

    def forward(self, *args, **kwargs):
        return self.language_model(*args, **kwargs)


class Qwen3VLShapedWrapper(VisionLanguageWrapper):
    """Bridge's Qwen3VLModel (Qwen3.5) at NeMo-RL 7ea279a's pin: also `decoder` as a property onto
    the text model's decoder (for Megatron-Core's inference helpers)."""

    @property
    def decoder(self):
        return getattr(self.language_model, "decoder", None)


def _pooled_equals_decoder_output(model, decoder_owner):
    """The pooled rows equal the response-token mean of the decoder's output (which ends in the
    final norm), read without any hook."""
    ids, mask, *_ = batch()
    pos = torch.arange(SEQ).expand_as(ids)
    with torch.no_grad():
        _, pooled = forward_and_pool(model, mask, ids, pos, causal_mask(SEQ))
        emb = decoder_owner.embedding(input_ids=ids, position_ids=pos)  # [S, B, H]
        rope = decoder_owner.rotary_pos_emb(SEQ)
        hidden = decoder_owner.decoder(
            hidden_states=emb, attention_mask=causal_mask(SEQ), rotary_pos_emb=rope
        )
    torch.testing.assert_close(pooled, reference_mean(hidden, mask), rtol=1e-6, atol=1e-6)


def test_hybrid_models_final_norm_is_hooked_and_pooled(mcore_single_process, monkeypatch):
    model = _hybrid_model(monkeypatch)
    assert find_final_norm(model) is model.decoder.final_norm
    _pooled_equals_decoder_output(model, model)


@pytest.mark.parametrize("wrapper_cls", [VisionLanguageWrapper, Qwen3VLShapedWrapper])
def test_vision_language_wrappers_text_model_is_hooked_and_pooled(
    mcore_single_process, wrapper_cls
):
    torch.manual_seed(0)
    wrapper = wrapper_cls(build_gpt_model(ARCH).eval())
    assert find_final_norm(wrapper) is wrapper.language_model.decoder.final_layernorm
    _pooled_equals_decoder_output(wrapper, wrapper.language_model)


def test_a_hybrid_stage_without_post_process_has_no_norm(mcore_single_process, monkeypatch):
    first = _hybrid_model(monkeypatch, post_process=False)
    assert find_final_norm(first) is None
    last = _hybrid_model(monkeypatch)
    assert find_final_norm([first, last]) is last.decoder.final_norm  # virtual pipeline chunks


def test_a_model_without_a_known_final_norm_is_refused_in_one_line(mcore_single_process):
    class Unknown(torch.nn.Module):
        post_process = True

        def __init__(self):
            super().__init__()
            self.backbone = torch.nn.Module()
            self.backbone.norm = torch.nn.LayerNorm(4)

    with pytest.raises(FinalNormNotFound) as e:
        require_final_norm([Unknown()])
    line = str(e.value)
    assert "\n" not in line
    assert "Unknown" in line and "clipo.enabled=false" in line
    gpt = build_gpt_model(ARCH, transformer_config(ARCH))
    assert require_final_norm(gpt) is gpt.decoder.final_layernorm
