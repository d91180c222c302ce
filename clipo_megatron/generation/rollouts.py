# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What every rollout backend serves: `Generator.generate`, its result `Rollouts`, and the chat text.

One home for the rollout API: the runner, the comparison and `eval` call `generate` without
knowing the backend, and both backends format prompts with one chat template, so the same
prompt gives the same token ids whichever backend samples it. A backend writes only how it
samples (`_sample`) and how it takes the policy's weights (`sync_from_megatron`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from clipo_megatron.generation.sampling import Sampling


@dataclass
class Rollouts:
    prompt_ids: list[list[int]]  # per rollout, the chat-formatted prompt tokens
    response_ids: list[list[int]]  # per rollout, generated tokens (EOS included when produced)
    texts: list[str]  # decoded responses
    prompt_index: list[int]  # which prompt each rollout answers


def chat_text(tokenizer, prompt: str | list[dict[str, str]]) -> str:
    """A user string or a full message list, formatted with the model's chat template (every backend)."""
    msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


class Generator(ABC):
    """A rollout backend: n samples per prompt from the current policy's weights."""

    tok: Any  # the policy's tokenizer (its chat template formats every prompt)
    # False: every rollout computes its own prompt (the pre-sharing path; tests and bench).
    share_prefill: bool = True

    def generate(
        self,
        prompts: list[str | list[dict[str, str]]],
        n: int,
        *,
        sampling: Sampling,
        max_tokens: int,
        seed: int,
    ) -> Rollouts:
        """n samples per prompt, rollouts of a prompt adjacent (temperature 0: greedy). `seed`
        makes the whole call reproducible; every sampling knob is passed explicitly, so a
        model's generation_config never applies."""
        chats = [chat_text(self.tok, p) for p in prompts]
        return self._sample(chats, n, sampling, max_tokens, seed)

    @abstractmethod
    def _sample(
        self, chats: list[str], n: int, sampling: Sampling, max_tokens: int, seed: int
    ) -> Rollouts:
        """The backend's sampling of n responses to each chat-formatted prompt."""

    @abstractmethod
    def sync_from_megatron(self, megatron_state: dict) -> None:
        """Load the Megatron policy's current weights, so the next rollouts come from them."""

    def _append(self, ro: Rollouts, prompt: list[int], response: list[int], index: int) -> None:
        """One rollout into `ro`; an empty response keeps its EOS token, which CLIPO pools."""
        response = response or [self.tok.eos_token_id]
        ro.prompt_ids.append(prompt)
        ro.response_ids.append(response)
        ro.texts.append(self.tok.decode(response, skip_special_tokens=True))
        ro.prompt_index.append(index)
