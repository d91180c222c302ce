# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Rollout generation with HF transformers, weights synced from the Megatron policy.

The documented fallback when vLLM is not installed (and the CPU default):
the generator is an HF copy of the policy; after every policy update
`sync_from_megatron` converts the GPTModel state dict (`megatron_to_hf`) and
loads it, so rollouts always come from the current policy.

Prefill is shared: the n rollouts of a prompt start from one KV cache of its
first W-1 (left-padded) positions, computed once per prompt and repeated
n-fold; `model.generate` then runs the last prompt position and the decode for
all P*n rows exactly as before (same rows, same sampling calls, so the same
draws from torch's generator for a given seed).
"""

from __future__ import annotations

import torch

from clipo_megatron.generation.rollouts import Generator, Rollouts
from clipo_megatron.generation.sampling import Sampling
from clipo_megatron.models.hf_convert import load_hf_from_megatron


class HFGenerator(Generator):
    def __init__(self, model, tokenizer, arch):
        self.model = model.eval()
        self.tok = tokenizer
        self.arch = arch

    @torch.no_grad()
    def _sample(
        self, chats: list[str], n: int, sampling: Sampling, max_tokens: int, seed: int
    ) -> Rollouts:
        """`model.generate` over the left-padded batch (`Sampling.hf_kwargs`), prefill shared."""
        torch.manual_seed(seed)
        enc = self.tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
        ids = enc.input_ids.repeat_interleave(n, 0)  # [P*n, W], rollouts of a prompt adjacent
        mask = enc.attention_mask.repeat_interleave(n, 0)  # [P*n, W]
        shared = {}
        if self.share_prefill and n > 1 and ids.shape[1] > 1:
            shared["past_key_values"] = self._prefill_once(enc.input_ids, enc.attention_mask, n)
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            **shared,
            **sampling.hf_kwargs(),
            max_new_tokens=max_tokens,
            pad_token_id=self.tok.pad_token_id,
        )
        width = ids.shape[1]
        rollouts = Rollouts([], [], [], [])
        eos = self.tok.eos_token_id
        for i, row in enumerate(out):
            prompt = ids[i][mask[i].bool()].tolist()
            resp = row[width:].tolist()
            if eos in resp:
                resp = resp[: resp.index(eos) + 1]
            resp = [t for t in resp if t != self.tok.pad_token_id or t == eos]
            self._append(rollouts, prompt, resp, i // n)
        return rollouts

    def _prefill_once(self, ids: torch.Tensor, mask: torch.Tensor, n: int):
        """KV of positions 0..W-2 of each distinct prompt [P, W], repeated to [P*n] rows.

        The last position stays for `generate`, which needs its logits for the first draw:
        it is recomputed per rollout (P*n tokens), the other W-1 once per prompt. Position ids
        are generate's own (from the padding mask), so the cached KV is what it would compute.
        """
        from transformers import DynamicCache

        pos = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)  # [P, W]
        cache = DynamicCache(config=self.model.config)
        self.model(
            input_ids=ids[:, :-1],
            attention_mask=mask[:, :-1],
            position_ids=pos[:, :-1],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,  # no [P, W-1, vocab] logits: only the KV is wanted
        )
        cache.batch_repeat_interleave(n)  # [P, ...] -> [P*n, ...], rollouts adjacent
        return cache

    @torch.no_grad()
    def sync_from_megatron(self, megatron_state: dict) -> None:
        load_hf_from_megatron(self.model, megatron_state, self.arch, "weight sync mismatch")
