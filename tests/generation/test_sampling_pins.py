# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A model's generation_config never reaches the sampler: every knob is pinned per call.

Qwen2.5-Instruct ships top_k 20 and repetition_penalty 1.05 in its generation_config.json;
HF `generate` merges such values into any knob the call leaves at transformers' default.
The tests give a tiny model an extreme generation_config and check that the generated tokens
are exactly those of the same model with a clean one (same seed), greedy and sampled, and
that greedy decoding equals a naive argmax loop written here.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")

from clipo_megatron.generation.hf_backend import HFGenerator  # noqa: E402
from clipo_megatron.generation.rollouts import chat_text  # noqa: E402
from clipo_megatron.generation.sampling import Sampling  # noqa: E402
from clipo_testkit.tiny_models import tiny_char_llama  # noqa: E402

PROMPTS = ["What is 3 + 4?", "Name a prime."]
MAX_TOKENS = 10


@pytest.fixture(scope="module")
def clean_and_leaky():
    model, tok = tiny_char_llama(hidden=64, seed=0)
    leaky = copy.deepcopy(model)
    # What a hub model could ship: each knob changes tokens if it applies.
    for key, value in dict(
        top_k=1, repetition_penalty=50.0, top_p=0.1, temperature=0.05, min_p=0.9, do_sample=True
    ).items():
        setattr(leaky.generation_config, key, value)
    return model, leaky, tok


def _tokens(model, tok, *, max_tokens: int, **knobs) -> list[list[int]]:
    gen = HFGenerator(model, tok, arch=None)
    return gen.generate(
        PROMPTS, 4, sampling=Sampling(**knobs), max_tokens=max_tokens, seed=3
    ).response_ids


def _argmax_loop(model, tok, prompt: str) -> list[int]:
    """Greedy decoding by hand: no penalty, no warper."""
    ids = tok(chat_text(tok, prompt), return_tensors="pt", add_special_tokens=False).input_ids
    out: list[int] = []
    with torch.no_grad():
        for _ in range(MAX_TOKENS):
            nxt = int(model(input_ids=ids).logits[0, -1].argmax())
            out.append(nxt)
            if nxt == tok.eos_token_id:
                break
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out


def test_greedy_is_argmax_whatever_the_generation_config(clean_and_leaky):
    clean, leaky, tok = clean_and_leaky
    kw = dict(temperature=0.0, top_p=1.0, max_tokens=MAX_TOKENS)
    got = _tokens(leaky, tok, **kw)
    for i, prompt in enumerate(PROMPTS):
        ref = _argmax_loop(clean, tok, prompt)
        # the penalty would act: the greedy continuation repeats a token
        assert len(set(ref)) < len(ref), ref
        assert got[4 * i] == ref


def test_sampling_ignores_the_generation_config(clean_and_leaky):
    clean, leaky, tok = clean_and_leaky
    kw = dict(temperature=1.0, top_p=1.0, max_tokens=MAX_TOKENS)
    assert _tokens(leaky, tok, **kw) == _tokens(clean, tok, **kw)
    # and the pinned knobs do act when asked for: top_k 1 samples the greedy tokens
    greedy = _tokens(clean, tok, temperature=0.0, top_p=1.0, max_tokens=MAX_TOKENS)
    assert _tokens(clean, tok, top_k=1, **kw) == greedy
    assert _tokens(clean, tok, **kw) != greedy


def test_hf_kwargs_pin_every_knob():
    s = Sampling(temperature=0.6, top_p=0.95)
    kw = s.hf_kwargs()
    assert kw["top_k"] == 0 and kw["repetition_penalty"] == 1.0 and kw["do_sample"] is True
    assert kw["min_p"] is None and kw["typical_p"] == 1.0 and kw["num_beams"] == 1
    g = Sampling(temperature=0.0).hf_kwargs()
    assert g["do_sample"] is False and g["repetition_penalty"] == 1.0


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(temperature=-0.1), "temperature=-0.1"),
        (dict(top_p=0.0), "top_p=0.0"),
        (dict(top_k=-1), "top_k=-1"),
        (dict(min_p=2.0), "min_p=2.0"),
        (dict(repetition_penalty=0.0), "repetition_penalty=0.0"),
    ],
)
def test_bad_sampling_is_one_line(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Sampling(**kw)


def test_vllm_gets_every_knob_and_not_the_models_defaults():
    """VLLMGenerator builds SamplingParams with every knob set (no engine: a recording stand-in)."""
    pytest.importorskip("vllm")
    from clipo_megatron.generation.vllm_backend import VLLMGenerator

    _, tok = tiny_char_llama(hidden=64, seed=0)
    seen = []

    class Engine:
        def reset_prefix_cache(self):
            pass

        def generate(self, prompts, params, use_tqdm=False):
            seen.append(params)
            return []

    gen = object.__new__(VLLMGenerator)
    gen.tok, gen.llm, gen.share_prefill = tok, Engine(), True
    gen.generate(["q"], 2, sampling=Sampling(0.6, 0.95), max_tokens=4, seed=0)
    p = seen[0]
    assert (p.temperature, p.top_p, p.top_k, p.min_p) == (0.6, 0.95, 0, 0.0)
    assert (p.repetition_penalty, p.presence_penalty, p.frequency_penalty) == (1.0, 0.0, 0.0)
    gen.generate(["q"], 1, sampling=Sampling(0.0, 0.95), max_tokens=4, seed=0)
    assert seen[1].temperature == 0.0 and seen[1].top_p == 1.0  # greedy
