# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Rollout generation with HF transformers, weights synced from the Megatron policy.

The documented fallback when vLLM is not installed (and the CPU default):
the generator is an HF copy of the policy; after every policy update
`sync_from_megatron` converts the GPTModel state dict (`megatron_to_hf`) and
loads it, so rollouts always come from the current policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clipo_megatron.models.hf_convert import load_hf_from_megatron


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


class HFGenerator:
    def __init__(self, model, tokenizer, arch):
        self.model = model.eval()
        self.tok = tokenizer
        self.arch = arch

    @torch.no_grad()
    def generate(
        self,
        prompts: list[str | list[dict[str, str]]],
        n: int,
        *,
        temperature: float,
        top_p: float,
        max_tokens: int,
        seed: int,
    ) -> Rollouts:
        """n samples per prompt; `seed` makes the whole batch reproducible."""
        torch.manual_seed(seed)
        chats = [chat_text(self.tok, p) for p in prompts for _ in range(n)]
        enc = self.tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
        out = self.model.generate(
            **enc,
            do_sample=temperature > 0,
            temperature=max(temperature, 1e-5),
            top_p=top_p,
            max_new_tokens=max_tokens,
            pad_token_id=self.tok.pad_token_id,
        )
        width = enc.input_ids.shape[1]
        rollouts = Rollouts([], [], [], [])
        eos = self.tok.eos_token_id
        for i, row in enumerate(out):
            prompt = enc.input_ids[i][enc.attention_mask[i].bool()].tolist()
            resp = row[width:].tolist()
            if eos in resp:
                resp = resp[: resp.index(eos) + 1]
            resp = [t for t in resp if t != self.tok.pad_token_id or t == eos]
            if not resp:
                resp = [eos]  # an empty response still has its EOS token to pool
            rollouts.prompt_ids.append(prompt)
            rollouts.response_ids.append(resp)
            rollouts.texts.append(self.tok.decode(resp, skip_special_tokens=True))
            rollouts.prompt_index.append(i // n)
        return rollouts

    @torch.no_grad()
    def sync_from_megatron(self, megatron_state: dict) -> None:
        load_hf_from_megatron(self.model, megatron_state, self.arch, "weight sync mismatch")
