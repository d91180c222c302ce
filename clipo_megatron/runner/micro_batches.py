# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner's micro-batches in one of two layouts, and their forward -> per-rollout logprobs.

- per-rollout: rows of the right-padded batch, ids [b, S] (every rollout repeats its prompt);
- shared-prefix (`train.shared_prefix`, the default): whole prompt groups packed one group per
  row, the prompt once (`runner/model/shared_prefix.py`); same numbers, ~G-fold fewer prompt tokens.

Both give logprobs in the per-rollout layout [b, S] (`logprobs[:, t]` = log p(ids[:, t] |
ids[:, <t]) at response tokens), so the objective's loss and the pooled states do not
know which layout ran. Each micro-batch is a dict the shared pooler reads
(`megatron/pooling/microbatch_pooler.py`): its rows (`SAMPLE_IDX_KEY`) and where their response
tokens are (`token_mask` [b, S], or `SEGMENTS_KEY` [R, T] for packed rows).
"""

from __future__ import annotations

import torch

from clipo_megatron.megatron.pooling.microbatch_pooler import SAMPLE_IDX_KEY, SEGMENTS_KEY
from clipo_megatron.runner.model.policy_passes import forward_logits, forward_packed_logits
from clipo_megatron.runner.model.shared_prefix import plan_shared_prefix, prompt_groups


def _per_rollout(ids, mask, rows: torch.Tensor) -> dict:
    return {SAMPLE_IDX_KEY: rows, "ids": ids[rows], "token_mask": mask[rows], "packed": None}


def _packed(p) -> dict:
    return {SAMPLE_IDX_KEY: p.rollouts, "ids": p.ids, SEGMENTS_KEY: p.segments, "packed": p}


def micro_batches(
    ids: torch.Tensor,
    mask: torch.Tensor,
    micro_batch: int,
    *,
    shared_prefix: bool,
    uniform: bool = False,
) -> list[dict]:
    """Micro-batches of at most `micro_batch` rollouts (packed: whole groups, at least one).

    `uniform` (pipeline schedules: fixed p2p shapes) makes every micro-batch the same shape:
    per-rollout, the largest divisor of the batch <= micro_batch rows; packed, the largest
    divisor of the number of groups that keeps <= micro_batch rollouts, rows of one width.
    """
    from clipo_megatron.runner.pipeline import uniform_micro_batch

    b = ids.shape[0]
    if not shared_prefix:
        size = uniform_micro_batch(b, micro_batch) if uniform else micro_batch
        return [
            _per_rollout(ids, mask, torch.arange(i, min(i + size, b))) for i in range(0, b, size)
        ]
    per_group = None
    if uniform:
        groups = prompt_groups(ids, mask)
        largest = max(len(g) for g in groups)
        per_group = uniform_micro_batch(len(groups), max(1, micro_batch // largest))
    plan = plan_shared_prefix(ids, mask, max_rollouts=micro_batch, groups_per_micro=per_group)
    return [_packed(p) for p in plan]


def forward(model, mb: dict) -> torch.Tensor:
    """The micro-batch's logits: [b, S, V] per-rollout, [R, T, V] packed."""
    return (
        forward_logits(model, mb["ids"])
        if mb["packed"] is None
        else forward_packed_logits(model, mb["packed"])
    )


def rollout_logprobs(logits: torch.Tensor, mb: dict, target_fn, seq_len: int) -> torch.Tensor:
    """[b, S] token logprobs in the per-rollout layout (0 off the response in packed rows).

    target_fn(logits [..., V(/tp)], targets [...]) -> [...] log p(target): plain or vocab-parallel.
    """
    p = mb["packed"]
    if p is None:
        ids = mb["ids"]
        lp = target_fn(logits[:, :-1], ids[:, 1:])  # [b, S-1]
        return torch.cat([torch.zeros_like(lp[:, :1]), lp], 1)
    sel = logits[p.src[:, 0], p.src[:, 1]]  # [N, V] the logits that predict each response token
    return p.to_rollout_layout(target_fn(sel, p.target), seq_len)


def seq_length(mbs: list[dict]) -> int:
    """The (common) width of the micro-batches' model input."""
    return max(int(mb["ids"].shape[1]) for mb in mbs)
