# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner's two passes over a batch of rollouts, one of each for every parallel layout.

- the fused logprob pass: token logprobs [B, S] and mean response hidden states [B, D]
  in one forward (the pooler the NeMo-RL workers use, `megatron/pooling/microbatch_pooler.py`),
  plus the frozen reference policy's logprobs when the run has a KL term;
- the policy update: one optimizer step on the registry objective's loss, micro-batches
  scaled by the batch's global normalisers so they sum to the batch loss.

Token ids and masks are right-padded [B, S]; `mask` is True at response tokens and
`logprobs[:, t]` is log p(ids[:, t] | ids[:, <t]) at response tokens. Both passes run
in either micro-batch layout (`runner/micro_batches.py`): shared-prefix packing (the
prompt once per group, the default) or one row per rollout; the numbers are the same.
The `layout` (`runner/layout.py`) supplies log p(target) (plain or vocab-parallel), the
schedule that runs the micro-batches (a loop, or Megatron-Core's pipeline schedule), the
grad clip and the broadcast of the last stage's results; the passes never test tp / pp.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from clipo_megatron.core.objectives import Objective
from clipo_megatron.megatron.pooling.microbatch_pooler import (
    SAMPLE_IDX_KEY,
    MicrobatchPooler,
    find_final_norm,
)
from clipo_megatron.runner.layout import Layout
from clipo_megatron.runner.micro_batches import forward, rollout_logprobs

SINGLE = Layout()  # one process: TP = PP = 1


def pack(prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int):
    """Right-padded token ids [B, S] and response mask [B, S] (True at response tokens)."""
    lens = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids)]
    s = max(lens)
    ids = torch.full((len(lens), s), pad_id, dtype=torch.long)
    mask = torch.zeros(len(lens), s, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        mask[i, len(p) : len(p) + len(r)] = True
    return ids, mask


@dataclass
class UpdateBatch:
    """The rows one policy update trains on."""

    ids: torch.Tensor  # [B, S] token ids
    mask: torch.Tensor  # [B, S] response mask
    old_logprobs: torch.Tensor  # [B, S] from the logprob pass (the sampling policy)
    advantages: torch.Tensor  # [B]
    ref_logprobs: torch.Tensor | None = None  # [B, S] the frozen reference (KL term), or None

    def rows(self, keep: torch.Tensor) -> UpdateBatch:
        """The rows `keep` selects: a bool mask [B] (DAPO's dynamic sampling) or indices (a micro-batch)."""
        ref = None if self.ref_logprobs is None else self.ref_logprobs[keep]
        return UpdateBatch(
            self.ids[keep], self.mask[keep], self.old_logprobs[keep], self.advantages[keep], ref
        )


@dataclass(frozen=True)
class PolicyLoss:
    """The registry objective with this run's knobs; None takes the objective's paper default."""

    objective: Objective
    eps_low: float | None
    eps_high: float | None
    kl_coef: float  # effective: > 0 only with reference logprobs

    def __call__(self, logprobs: torch.Tensor, mb: UpdateBatch, whole: UpdateBatch):
        """A micro-batch's loss, normalised by the whole batch's response tokens (token-mean)
        or rows, empty ones included (seq-mean-token-mean; NeMo-RL's global_valid_seqs), so
        micro-batches sum to the batch loss."""
        return self.objective.loss(
            logprobs,
            mb.old_logprobs,
            mb.advantages,
            mb.mask,
            eps_low=self.eps_low,
            eps_high=self.eps_high,
            ref_logprobs=mb.ref_logprobs if self.kl_coef > 0 else None,
            kl_coef=self.kl_coef,
            num_tokens=float(whole.mask.sum()),
            num_seqs=float(whole.mask.shape[0]),
        )


def _in_rows(parts: list[torch.Tensor], mbs: list[dict]) -> torch.Tensor:
    """Per-micro-batch [b_k, S] results back in batch row order [B, S]."""
    rows = torch.cat([mb[SAMPLE_IDX_KEY] for mb in mbs])
    return torch.cat(parts)[torch.argsort(rows)]


def logprob_and_pool(
    model,
    ids,
    mask,
    micro_batch: int,
    ref_model=None,
    *,
    layout: Layout = SINGLE,
    shared_prefix: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The fused logprob pass: logprobs [B, S], pooled states [B, D], the rows that pooled no
    token [B] bool (left out of CLIPO's contrastive set) and reference logprobs [B, S] | None,
    on every stage.

    The same pass the NeMo-RL workers run: micro-batches teed through `MicrobatchPooler`,
    the final norm hooked (on the last stage), one forward-only schedule over the policy
    and one more over the frozen reference policy when there is one.
    """
    s = ids.shape[1]
    micro = layout.micro_batches(ids, mask, micro_batch, shared_prefix=shared_prefix)
    last = layout.is_last_stage

    def forward_step(it, net):
        mb = next(it)
        # forward only: the schedule's loss is a zero; the logprobs travel in the info dict
        return forward(net, mb), lambda logits: (
            logits.new_zeros(()),
            {"lp": rollout_logprobs(logits, mb, layout.target_logprobs, s)},
        )

    def one_pass(net, pooler: MicrobatchPooler | None) -> torch.Tensor | None:
        """One forward-only schedule; pools into `pooler` (the policy's pass) when given."""
        net.eval()
        hooked: contextlib.AbstractContextManager = contextlib.nullcontext()
        data = None
        if last and pooler is not None:  # the final norm, and so the pooled states, live there
            hooked, data = pooler.hooked(find_final_norm(net)), pooler.tee(micro)
        with torch.no_grad(), hooked:
            outs = layout.schedule(net, micro, forward_step, forward_only=True, data=data)
        return _in_rows([o["lp"] for o in outs], micro) if last else None

    pooler = MicrobatchPooler()
    lp = one_pass(model, pooler)
    ref = one_pass(ref_model, None) if ref_model is not None else None
    return layout.broadcast((lp, *_in_row_order(pooler), ref) if last else None)


def _in_row_order(pooler: MicrobatchPooler) -> tuple[torch.Tensor, torch.Tensor]:
    rows, pooled = pooler.result()
    order = torch.argsort(rows)
    return pooled[order], pooler.empty_rows()[order]  # [B, D], [B]


def policy_update(
    model,
    optimizer,
    batch: UpdateBatch,
    loss_fn: PolicyLoss,
    micro_batch: int,
    grad_clip: float,
    *,
    layout: Layout = SINGLE,
    shared_prefix: bool = True,
) -> dict[str, float]:
    """One optimizer step on every stage; `pg/loss` is the batch loss (the sum of the
    micro-batches'), the metrics the last stage's, on every stage."""
    s = batch.ids.shape[1]
    micro = layout.micro_batches(batch.ids, batch.mask, micro_batch, shared_prefix=shared_prefix)

    def forward_step(it, net):
        mb = next(it)

        def loss_func(logits):
            rows = batch.rows(mb[SAMPLE_IDX_KEY])
            loss, stats = loss_fn(
                rollout_logprobs(logits, mb, layout.target_logprobs, s), rows, batch
            )
            return loss, {
                "loss": float(loss.detach()),
                "stats": stats,
                "ntok": float(rows.mask.sum()),
            }

        return forward(net, mb), loss_func

    model.train()
    optimizer.zero_grad(set_to_none=True)
    outs = layout.schedule(model, micro, forward_step, forward_only=False)
    layout.finish_grads(model)
    grad_norm = float(layout.clip_grad_norm(model.parameters(), grad_clip))  # global: every rank
    stats = None
    if layout.is_last_stage:
        stats = {
            "pg/loss": sum(o["loss"] for o in outs),
            **_token_mean([(o["stats"], o["ntok"]) for o in outs]),
        }
    stats = layout.broadcast(stats)
    # A NaN / inf loss or grad norm skips the step (weights and AdamW moments untouched), as
    # Megatron's optimizer does; every rank decides alike (global norm, broadcast loss).
    finite = math.isfinite(grad_norm) and math.isfinite(stats["pg/loss"])
    if finite:
        optimizer.step()
    else:
        optimizer.zero_grad(set_to_none=True)
    return {**stats, "pg/grad_norm": grad_norm, "train/skipped_nonfinite": float(not finite)}


def _token_mean(per_mb: list[tuple[dict, float]]) -> dict[str, float]:
    """The batch's per-token metrics from the micro-batches' (token means, token counts)."""
    n = sum(w for _, w in per_mb) or 1.0
    return {k: sum(st[k] * w for st, w in per_mb) / n for k in per_mb[-1][0]} if per_mb else {}
