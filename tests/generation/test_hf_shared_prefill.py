# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""HF generator with shared prefill vs the per-rollout path: same tokens, prompt computed once.

The reference is plain `model.generate` on the batch that repeats each prompt n times (what
HFGenerator did before). The shared path keeps generate's rows and sampling calls, so for a
fixed seed the draws are the same; tokens are compared exactly, greedy and sampled.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from clipo_megatron.generation.hf_backend import HFGenerator  # noqa: E402
from clipo_megatron.generation.rollouts import chat_text  # noqa: E402
from clipo_megatron.generation.sampling import Sampling  # noqa: E402
from clipo_testkit.tiny_models import tiny_char_llama  # noqa: E402
from clipo_testkit.token_counting import HFTokenCounter  # noqa: E402

PROMPTS = [
    "What is 3 + 4? Put the answer in \\boxed{}.",
    "Name a prime.",  # shorter: left padding in the batch
    [{"role": "user", "content": "Count to five, slowly."}],
]
N = 4
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def model_tok():
    return tiny_char_llama(hidden=64, seed=0)


def _width(tok) -> int:
    enc = tok([chat_text(tok, p) for p in PROMPTS], padding=True, add_special_tokens=False)
    return len(enc.input_ids[0])


def _per_rollout(model, tok, *, temperature, top_p, seed, n=N) -> list[list[int]]:
    """The naive reference: each prompt repeated n times, every row prefilled on its own."""
    torch.manual_seed(seed)
    chats = [chat_text(tok, p) for p in PROMPTS for _ in range(n)]
    enc = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(
        **enc,
        do_sample=temperature > 0,
        temperature=max(temperature, 1e-5),
        top_p=top_p,
        top_k=0,  # HFGenerator pins every knob: no top-k unless asked (transformers' default is 50)
        max_new_tokens=MAX_TOKENS,
        pad_token_id=tok.pad_token_id,
    )
    resps = []
    for row in out[:, enc.input_ids.shape[1] :].tolist():
        if tok.eos_token_id in row:
            row = row[: row.index(tok.eos_token_id) + 1]
        resps.append([t for t in row if t != tok.pad_token_id] or [tok.eos_token_id])
    return resps


def _shared(model, tok, *, temperature, top_p, seed):
    gen = HFGenerator(model, tok, arch=None)
    return gen.generate(
        PROMPTS, N, sampling=Sampling(temperature, top_p), max_tokens=MAX_TOKENS, seed=seed
    )


def test_greedy_tokens_identical_and_prompt_computed_once(model_tok):
    model, tok = model_tok
    w, p = _width(tok), len(PROMPTS)
    with HFTokenCounter(model, w) as ref_count:
        ref = _per_rollout(model, tok, temperature=0.0, top_p=1.0, seed=0)
    with HFTokenCounter(model, w) as new_count:
        ro = _shared(model, tok, temperature=0.0, top_p=1.0, seed=0)
    assert ro.response_ids == ref
    assert ro.prompt_index == [i for i in range(p) for _ in range(N)]
    # Per-rollout: every row computes all W prompt positions. Shared: W-1 once per prompt, the
    # last one per rollout (generate needs its logits for the first draw).
    assert ref_count.prefill == p * N * w
    assert new_count.prefill == p * (w - 1) + p * N
    assert new_count.decode == ref_count.decode == p * N * (MAX_TOKENS - 1)


@pytest.mark.parametrize("seed", [0, 1])
def test_sampled_tokens_identical_for_a_seed(model_tok, seed):
    model, tok = model_tok
    kw = dict(temperature=1.0, top_p=0.9, seed=seed)
    ro = _shared(model, tok, **kw)
    assert ro.response_ids == _per_rollout(model, tok, **kw)
    other = _shared(model, tok, **{**kw, "seed": seed + 7})
    assert other.response_ids != ro.response_ids  # the seed matters: not a constant output


def test_first_draw_logits_from_shared_cache_match_full_prefill(model_tok):
    """Why the tokens agree: the last prompt position's logits over the shared cache are the
    full prefill's to fp32 rounding."""
    model, tok = model_tok
    gen = HFGenerator(model, tok, arch=None)
    enc = tok(
        [chat_text(tok, p) for p in PROMPTS],
        return_tensors="pt",
        padding=True,
        add_special_tokens=False,
    )
    mask = enc.attention_mask  # [P, W]
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    with torch.no_grad():
        full = model(input_ids=enc.input_ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        cache = gen._prefill_once(enc.input_ids, mask, N)
        last = model(
            input_ids=enc.input_ids[:, -1:].repeat_interleave(N, 0),
            attention_mask=mask.repeat_interleave(N, 0),
            position_ids=pos[:, -1:].repeat_interleave(N, 0),
            past_key_values=cache,
        ).logits[:, -1]  # [P*N, V]
    torch.testing.assert_close(last, full.repeat_interleave(N, 0), atol=1e-5, rtol=0)


def test_one_rollout_per_prompt_takes_the_plain_path(model_tok):
    model, tok = model_tok
    w = _width(tok)
    with HFTokenCounter(model, w) as count:
        ro = HFGenerator(model, tok, arch=None).generate(
            PROMPTS, 1, sampling=Sampling(0.0, 1.0), max_tokens=MAX_TOKENS, seed=0
        )
    assert count.prefill == len(PROMPTS) * w
    assert ro.response_ids == _per_rollout(model, tok, temperature=0.0, top_p=1.0, seed=0, n=1)
