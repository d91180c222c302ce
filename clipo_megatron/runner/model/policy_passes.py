# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The policy's plain passes on a Megatron-Core GPTModel (TP = PP = 1 path), shared by both drivers.

The single-machine runner runs its model through these functions (token logprobs of a
right-padded batch, and sampling); the NeMo-RL contract suite samples with the same `sample`
over NeMo-RL's own worker's model on CPU (Megatron-Core's inference engine is CUDA-only). The CLIPO capture rides
these forwards from outside (a final-norm hook, `megatron/pooling/microbatch_pooler.py`),
so the passes themselves know nothing of CLIPO.

Layout: ids [B, S] right-padded; the model returns logits [B, S, V].
"""

from __future__ import annotations

import torch


def causal_mask(s: int) -> torch.Tensor:
    """[1, 1, S, S] bool, True = masked (Megatron's convention); explicit so nothing is built on cuda."""
    return torch.triu(torch.ones(s, s, dtype=torch.bool), 1).view(1, 1, s, s)


def forward_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """[B, S] token ids -> [B, S, V] logits (one causal forward)."""
    b, s = ids.shape
    pos = torch.arange(s).expand(b, s)
    return model(ids, pos, causal_mask(s))


def forward_packed_logits(model, packed) -> torch.Tensor:
    """A shared-prefix micro-batch (`shared_prefix.PackedGroups`) -> [R, T, V] logits."""
    from clipo_megatron.runner.model.shared_prefix import packed_rope

    with packed_rope(model, packed.position_ids):
        return model(packed.ids, packed.position_ids, packed.attention_mask)


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[..., V] logits, [...] targets -> [...] log p(target) (fp32)."""
    return torch.log_softmax(logits.float(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[B, S] log p(ids[:, t] | ids[:, <t]); position 0 (never a response token) gets 0."""
    lp = target_logprobs(logits[:, :-1], ids[:, 1:])  # [B, S-1]
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], 1)


@torch.no_grad()
def _next_tokens(
    last: torch.Tensor,
    temperature: float,
    top_k: int | None,
    greedy: bool,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """last [B, V] logits -> (token [B], its logprob [B] under the temperature-scaled, top-k
    distribution it was drawn from; greedy: the argmax under the raw logits)."""
    if greedy:
        tok = last.argmax(-1)
        return tok, torch.log_softmax(last, -1).gather(-1, tok[:, None]).squeeze(-1)
    scaled = last / max(temperature, 1e-6)
    if top_k:
        kth = scaled.topk(top_k, -1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    logp = torch.log_softmax(scaled, -1)  # [B, V]
    tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


def sample(
    model,
    input_ids: torch.Tensor,
    input_lengths: torch.Tensor,
    *,
    max_new_tokens: int,
    stop_token_ids: list[int],
    pad_id: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Autoregressive sampling without a KV cache (small models on CPU).

    input_ids [B, S] right-padded with lengths [B]. Returns NeMo-RL's
    GenerationOutputSpec fields: output_ids [B, S_out] right-padded,
    logprobs [B, S_out] (sampled tokens' logprobs under the temperature-scaled
    distribution, 0 at prompt and padding), generation_lengths [B],
    unpadded_sequence_lengths [B], truncated [B] (no stop token within budget).
    """
    b = input_ids.shape[0]
    lengths = input_lengths.long().clone()  # [B]
    cap = int(lengths.max()) + max_new_tokens
    ids = torch.full((b, cap), pad_id, dtype=torch.long)
    ids[:, : input_ids.shape[1]] = input_ids[:, :cap]
    lps = torch.zeros(b, cap)
    done = torch.zeros(b, dtype=torch.bool)
    gen_len = torch.zeros(b, dtype=torch.long)
    stops = torch.tensor(stop_token_ids, dtype=torch.long)
    model.eval()
    for _ in range(max_new_tokens):
        s = int(lengths.max())
        logits = forward_logits(model, ids[:, :s]).float()  # [B, s, V]
        last = logits[torch.arange(b), lengths - 1]  # [B, V]
        tok, lp = _next_tokens(last, temperature, top_k, greedy, generator)  # [B], [B]
        live = ~done
        rows = live.nonzero().flatten()
        ids[rows, lengths[rows]] = tok[rows]
        lps[rows, lengths[rows]] = lp[rows]
        lengths[rows] += 1
        gen_len[rows] += 1
        done |= live & torch.isin(tok, stops)
        if bool(done.all()):
            break
    s_out = int(lengths.max())
    return {
        "output_ids": ids[:, :s_out],
        "logprobs": lps[:, :s_out],
        "generation_lengths": gen_len,
        "unpadded_sequence_lengths": lengths,
        "truncated": ~done,
    }
