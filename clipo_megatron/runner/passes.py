# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner's two passes over a batch of rollouts, plain and through the pipeline schedule.

- the fused logprob pass: token logprobs [B, S] and mean response hidden states [B, D]
  in one forward (the pooler the NeMo-RL workers use, `megatron/microbatch_pooler.py`),
  plus the frozen reference policy's logprobs when the run has a KL term;
- the policy update: one optimizer step on the registry objective's loss, micro-batches
  scaled by the batch's global normalisers so they sum to the batch loss.

Token ids and masks are right-padded [B, S]; `mask` is True at response tokens and
`logprobs[:, t]` is log p(ids[:, t] | ids[:, <t]) at response tokens. Both passes run
in either micro-batch layout (`runner/micro_batches.py`): shared-prefix packing (the
prompt once per group, the default) or one row per rollout; the numbers are the same.
`target_fn` is the plain or vocab-parallel (TP) log p(target) of a logits tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clipo_megatron.core.objectives import Objective
from clipo_megatron.megatron.microbatch_pooler import MicrobatchPooler, find_final_norm
from clipo_megatron.megatron.policy_passes import target_logprobs
from clipo_megatron.runner import parallel
from clipo_megatron.runner.micro_batches import (
    forward,
    micro_batches,
    rollout_logprobs,
    seq_length,
)


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


def _in_row_order(pooler: MicrobatchPooler) -> torch.Tensor:
    rows, pooled = pooler.result()
    return pooled[torch.argsort(rows)]  # [B, D]


def _in_rows(parts: list[torch.Tensor], mbs: list[dict]) -> torch.Tensor:
    """Per-micro-batch [b_k, S] results back in batch row order [B, S]."""
    from clipo_megatron.megatron.microbatch_pooler import SAMPLE_IDX_KEY

    rows = torch.cat([mb[SAMPLE_IDX_KEY] for mb in mbs])
    return torch.cat(parts)[torch.argsort(rows)]


def logprob_and_pool(
    model,
    ids,
    mask,
    micro_batch: int,
    target_fn=target_logprobs,
    ref_model=None,
    *,
    shared_prefix: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The fused logprob pass: logprobs [B, S], pooled states [B, D], reference logprobs [B, S] | None.

    The same pass the NeMo-RL workers run: microbatches teed through
    `MicrobatchPooler`, the final norm hooked, one forward per microbatch (and one
    more on the frozen reference policy when there is one).
    """
    s = ids.shape[1]
    mbs = micro_batches(ids, mask, micro_batch, shared_prefix=shared_prefix)
    pooler = MicrobatchPooler()
    lps, refs = [], []
    model.eval()
    with torch.no_grad(), pooler.hooked(find_final_norm(model)):
        for mb in pooler.tee(mbs):
            lps.append(rollout_logprobs(forward(model, mb), mb, target_fn, s))
            if ref_model is not None:
                refs.append(rollout_logprobs(forward(ref_model, mb), mb, target_fn, s))
    ref = _in_rows(refs, mbs) if refs else None
    return _in_rows(lps, mbs), _in_row_order(pooler), ref


def policy_update(
    model,
    optimizer,
    batch: UpdateBatch,
    loss_fn: PolicyLoss,
    micro_batch: int,
    grad_clip: float,
    target_fn=target_logprobs,
    clip_fn=torch.nn.utils.clip_grad_norm_,
    *,
    shared_prefix: bool = True,
) -> dict[str, float]:
    """One optimizer step; `pg/loss` is the batch loss (the sum of the micro-batches')."""
    from clipo_megatron.megatron.microbatch_pooler import SAMPLE_IDX_KEY

    s = batch.ids.shape[1]
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total, per_mb = 0.0, []
    for mb in micro_batches(batch.ids, batch.mask, micro_batch, shared_prefix=shared_prefix):
        rows = batch.rows(mb[SAMPLE_IDX_KEY])
        loss, stats = loss_fn(rollout_logprobs(forward(model, mb), mb, target_fn, s), rows, batch)
        loss.backward()
        total += float(loss.detach())
        per_mb.append((stats, float(rows.mask.sum())))
    grad_norm = clip_fn(model.parameters(), grad_clip)
    optimizer.step()
    return {"pg/loss": total, "pg/grad_norm": float(grad_norm), **_token_mean(per_mb)}


def _token_mean(per_mb: list[tuple[dict, float]]) -> dict[str, float]:
    """The batch's per-token metrics from the micro-batches' (token means, token counts)."""
    n = sum(w for _, w in per_mb) or 1.0
    return {k: sum(st[k] * w for st, w in per_mb) / n for k in per_mb[-1][0]} if per_mb else {}


def pipeline_logprob_and_pool(
    model,
    ids,
    mask,
    micro_batch: int,
    target_fn=target_logprobs,
    ref_model=None,
    *,
    shared_prefix: bool = True,
):
    """`logprob_and_pool` through Megatron-Core's pipeline schedule (forward only); every stage
    gets the result. The reference policy's logprobs take one more forward-only schedule."""
    from clipo_megatron.runner.pipeline import broadcast_from_last_stage, run_schedule

    s = ids.shape[1]
    micro = micro_batches(ids, mask, micro_batch, shared_prefix=shared_prefix, uniform=True)
    last = parallel.is_pipeline_last_stage()

    def forward_step(it, m):
        mb = next(it)
        out = forward(m, mb)  # the last stage's final norm is hooked: pooled here
        if not last:
            return out, None
        return out, lambda logits: (
            logits.sum() * 0.0,
            {"lp": rollout_logprobs(logits, mb, target_fn, s)},
        )

    def one_pass(net, pooler):
        net.eval()
        with torch.no_grad(), pooler.hooked(find_final_norm(net) if last else None):
            outs = run_schedule(
                net,
                micro,
                forward_step,
                forward_only=True,
                seq_length=seq_length(micro),
                data=pooler.tee(micro) if last else None,
            )
        return _in_rows([o["lp"] for o in outs], micro) if last else None

    pooler = MicrobatchPooler()
    lp = one_pass(model, pooler)
    ref = one_pass(ref_model, MicrobatchPooler()) if ref_model is not None else None
    res = (lp, _in_row_order(pooler), ref) if last else None
    return broadcast_from_last_stage(res)


def pipeline_policy_update(
    model,
    optimizer,
    batch: UpdateBatch,
    loss_fn: PolicyLoss,
    micro_batch: int,
    grad_clip: float,
    target_fn=target_logprobs,
    clip_fn=None,
    *,
    shared_prefix: bool = True,
) -> dict[str, float]:
    """`policy_update` through the pipeline schedule (1F1B); metrics from the last stage, on every stage."""
    from clipo_megatron.megatron.microbatch_pooler import SAMPLE_IDX_KEY
    from clipo_megatron.runner.pipeline import (
        allreduce_tied_embedding_grads,
        broadcast_from_last_stage,
        run_schedule,
    )

    s = batch.ids.shape[1]
    micro = micro_batches(
        batch.ids, batch.mask, micro_batch, shared_prefix=shared_prefix, uniform=True
    )
    last = parallel.is_pipeline_last_stage()

    def forward_step(it, m):
        mb = next(it)
        out = forward(m, mb)
        if not last:
            return out, None

        def stage_loss(logits):
            rows = batch.rows(mb[SAMPLE_IDX_KEY])
            loss, stats = loss_fn(rollout_logprobs(logits, mb, target_fn, s), rows, batch)
            # The schedule divides by the number of micro-batches; the global normalisers already weigh them.
            return loss * len(micro), {
                "loss": float(loss.detach()),
                "stats": stats,
                "ntok": float(rows.mask.sum()),
            }

        return out, stage_loss

    model.train()
    optimizer.zero_grad(set_to_none=True)
    outs = run_schedule(
        model, micro, forward_step, forward_only=False, seq_length=seq_length(micro)
    )
    allreduce_tied_embedding_grads(model)
    grad_norm = clip_fn(model.parameters(), grad_clip)
    optimizer.step()
    stats = (
        {
            "pg/loss": sum(o["loss"] for o in outs),
            **_token_mean([(o["stats"], o["ntok"]) for o in outs]),
        }
        if outs
        else None
    )
    return {**broadcast_from_last_stage(stats), "pg/grad_norm": float(grad_norm)}
