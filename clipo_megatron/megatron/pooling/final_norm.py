# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Where each model class keeps the final norm whose output CLIPO pools.

CLIPO pools the input of the output layer: the decoder's final norm on the last pipeline stage.
Megatron-Core and Megatron-Bridge name it differently per model class:

    GPTModel (Llama, Qwen, DeepSeek-V3 / MLA, gpt-oss)   decoder.final_layernorm
    HybridModel / MambaModel (Nemotron-H, Nemotron 3)     decoder.final_norm
    vision-language wrappers (Bridge's Qwen3VLModel for    language_model.decoder.<either name>
      Qwen3.5, LLaVA-style models)

through Megatron-Core's wrappers (DDP, FSDP, Float16Module; `unwrap_model`) and over a list of
virtual-pipeline chunks. A model whose last stage has none of these cannot be captured: the
worker refuses at `clipo_setup` (`require_final_norm`), before the first rollout, rather than
after a cluster has started and generated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

NORM_NAMES = ("final_layernorm", "final_norm")  # TransformerBlock / HybridStack
# where a wrapper keeps its text model (searched before the chunk itself)
TEXT_MODEL_ATTRS = ("language_model",)
SEARCHED = "decoder.final_layernorm, decoder.final_norm, language_model.decoder.<either>"


class FinalNormNotFound(ValueError):
    """The last pipeline stage has no final norm CLIPO knows how to hook (a user-facing line)."""


def _chunks(model: Any) -> list[Any]:
    from megatron.core.utils import unwrap_model

    return list(unwrap_model(list(model) if isinstance(model, list | tuple) else [model]))


def _text_models(chunk: Any) -> Iterator[Any]:
    """The wrapper's text model first (its `decoder` may be a property onto it), then the chunk."""
    for attr in TEXT_MODEL_ATTRS:
        inner = getattr(chunk, attr, None)
        if isinstance(inner, torch.nn.Module):
            yield inner
    yield chunk


def _norm_of(text_model: Any) -> torch.nn.Module | None:
    if not getattr(text_model, "post_process", True):  # not the stage that runs the norm
        return None
    decoder = getattr(text_model, "decoder", None)
    for name in NORM_NAMES:
        norm = getattr(decoder, name, None)
        if isinstance(norm, torch.nn.Module):
            return norm
    return None


def find_final_norm(model: Any) -> torch.nn.Module | None:
    """The final norm of the last model chunk that runs one (its `post_process` stage), for
    every model class above; None when no chunk has one (an earlier pipeline stage)."""
    for chunk in reversed(_chunks(model)):
        for text_model in _text_models(chunk):
            norm = _norm_of(text_model)
            if norm is not None:
                return norm
    return None


def model_class_names(model: Any) -> str:
    """`Qwen3VLModel(language_model: Qwen3VLGPTModel)`-style names of the unwrapped chunks."""
    names = []
    for chunk in _chunks(model):
        inner = [
            f"{a}: {type(getattr(chunk, a)).__name__}"
            for a in TEXT_MODEL_ATTRS
            if isinstance(getattr(chunk, a, None), torch.nn.Module)
        ]
        names.append(type(chunk).__name__ + (f"({', '.join(inner)})" if inner else ""))
    return ", ".join(dict.fromkeys(names))


def require_final_norm(model: Any) -> torch.nn.Module:
    """The last stage's final norm, or one line naming the model class and the fix."""
    norm = find_final_norm(model)
    if norm is None:
        raise FinalNormNotFound(
            f"CLIPO cannot capture the final hidden states of {model_class_names(model)} on the "
            f"last pipeline stage: it has no final norm at {SEARCHED} (with post_process on); "
            "CLIPO has not run with this model class: train it with clipo.enabled=false, or add "
            "its final norm's path to clipo_megatron/megatron/pooling/final_norm.py"
        )
    return norm
