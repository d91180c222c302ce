# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The rollout API both backends inherit: chat formatting before the backend samples, one
rollout per (prompt, sample) in order, an empty response kept as its EOS token."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from clipo_megatron.generation.rollouts import Generator, Rollouts, chat_text  # noqa: E402
from clipo_megatron.generation.sampling import Sampling  # noqa: E402
from clipo_testkit.tiny_models import tiny_char_llama  # noqa: E402


class Scripted(Generator):
    """Answers each chat with scripted token lists; records what it was asked."""

    def __init__(self, tok, responses: list[list[int]]):
        self.tok = tok
        self.responses = responses
        self.calls: list[tuple] = []

    def _sample(self, chats, n, sampling, max_tokens, seed) -> Rollouts:
        self.calls.append((chats, n, sampling, max_tokens, seed))
        ro = Rollouts([], [], [], [])
        for i, chat in enumerate(chats):
            prompt = self.tok(chat, add_special_tokens=False).input_ids
            for j in range(n):
                self._append(ro, prompt, list(self.responses[i * n + j]), i)
        return ro

    def sync_from_megatron(self, megatron_state: dict) -> None:
        raise AssertionError("not called here")


def test_generate_formats_chats_and_keeps_eos_for_empty_responses():
    _, tok = tiny_char_llama(hidden=64, seed=0)
    hello = tok("hi", add_special_tokens=False).input_ids
    gen = Scripted(tok, [hello, [], hello + [tok.eos_token_id], []])
    sampling = Sampling(temperature=0.7)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    ro = gen.generate(["1+1?", messages], 2, sampling=sampling, max_tokens=5, seed=3)

    ((chats, n, s, max_tokens, seed),) = gen.calls
    assert chats == [chat_text(tok, "1+1?"), chat_text(tok, messages)]
    assert "1+1?" in chats[0] and "be brief" in chats[1]
    assert (n, s, max_tokens, seed) == (2, sampling, 5, 3)
    assert ro.prompt_index == [0, 0, 1, 1]
    assert ro.response_ids == [
        hello,
        [tok.eos_token_id],
        hello + [tok.eos_token_id],
        [tok.eos_token_id],
    ]
    assert ro.texts[0] == tok.decode(hello, skip_special_tokens=True) == ro.texts[2]
    assert ro.prompt_ids[0] == ro.prompt_ids[1] != ro.prompt_ids[2]


def test_a_backend_must_sample_and_sync():
    class NoSync(Generator):
        def _sample(self, chats, n, sampling, max_tokens, seed):
            return Rollouts([], [], [], [])

    with pytest.raises(TypeError, match="sync_from_megatron"):
        NoSync()
