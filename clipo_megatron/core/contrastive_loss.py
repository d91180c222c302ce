# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO's group contrastive loss: the preparation every loss shares, then its kernel.

For one prompt with rollouts y_1..y_G, embeddings e_i and binary rewards r_i
(paper Sec. 3.2, eq. "contrastive_loss_sample"; App. "Contrastive Loss Variants"):

    s_ij = e_i . e_j / tau                        (e L2-normalised if cosine)
    P(i) = other rollouts of the group with the same correctness as anchor i
    A(i) = denominator set (default: every other rollout of the group; options:
           add the anchor itself as in the paper's eq., or keep only the
           positive(s) being scored and the negatives)

    L_i    = the kernel of CLIPOConfig.loss_type (InfoNCE, SupCon "out", SoftNN:
             the registry in core/contrastive_kernels.py, where their formulas are)

Anchors are the correct rollouts by default. An anchor counts only if it
has >= 1 positive and >= 1 negative in its group; for correct anchors this is
the paper's validity rule 1 < |P| < G. A row outside `member` (a response with no token
to pool) is not in the contrastive set: its group is the rest, valid or not by the same
rule, and the row gets no loss, no reward and no anchor. Everything is computed per group on
padded [N, G, G] blocks: memory O(B * G), never O(B^2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from clipo_megatron.core.config import CLIPOConfig
from clipo_megatron.core.contrastive_kernels import GroupPairs, get_contrastive_loss
from clipo_megatron.core.groups import GroupIds, GroupLayout, as_group_ids
from clipo_megatron.core.pairs import build_group_pairs

# Reduces the per-group Gram of a TP-sharded embedding dim (column-parallel
# head) to the full sum: forward all-reduce, backward identity. None if unsharded.
SumReduce = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class ContrastiveResult:
    """Per-rollout outputs of the group contrastive loss (all [B] unless noted)."""

    loss: torch.Tensor  # [] mean over anchors (counted by `local_mask`); carries grad
    per_sample_loss: torch.Tensor  # [B] L_i for anchors, 0 elsewhere; carries grad
    anchor_mask: torch.Tensor  # [B] bool, rollout is a counted anchor
    reward_mask: (
        torch.Tensor
    )  # [B] bool, anchor whose loss becomes its reward (see core/rewards.py)
    valid_group: torch.Tensor  # [B] bool, its group has >= 2 correct and >= 1 incorrect
    positive_index: torch.Tensor  # [B] long, batch row of the sampled InfoNCE positive, -1 if none
    num_anchors: int  # anchors in the whole batch
    stats: dict[str, torch.Tensor]  # detached sums/counts for metrics
    member: torch.Tensor  # [B] bool, in the contrastive set (a row with nothing pooled is not)


def check_binary(correct: torch.Tensor, name: str = "rewards") -> torch.Tensor:
    """Return `correct` as bool, raising if any value is not 0/1."""
    if correct.dtype == torch.bool:
        return correct
    bad = ~((correct == 0) | (correct == 1))
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()[:8].tolist()
        vals = correct[bad][:8].tolist()
        raise ValueError(
            f"{name} must be binary (0/1) for CLIPO's correctness labels; rows {rows} have {vals}. "
            "Binarise them first (e.g. reward > threshold) or fix the verifier."
        )
    return correct.bool()


def valid_groups(labels: torch.Tensor, slot_valid: torch.Tensor) -> torch.Tensor:
    """[N, G] correctness, [N, G] real slots -> [N] bool: the group has >= 2 correct and >= 1
    incorrect rollouts (the paper's 1 < |P| < G). The one home of CLIPO's validity rule."""
    n_correct = (labels & slot_valid).sum(-1)  # [N]
    n_wrong = (~labels & slot_valid).sum(-1)  # [N]
    return (n_correct >= 2) & (n_wrong >= 1)


def l2_normalize(
    x: torch.Tensor, *, reduce: SumReduce | None = None, eps: float = 1e-12
) -> torch.Tensor:
    """L2-normalise the last dim; `reduce` completes squared norms of a sharded dim."""
    sq = (x * x).sum(-1, keepdim=True)
    if reduce is not None:
        sq = reduce(sq)
    return x * torch.rsqrt(sq.clamp_min(eps * eps))


def _check_inputs(embeddings: torch.Tensor, correct: torch.Tensor, group_ids: torch.Tensor) -> None:
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be [B, d], got shape {tuple(embeddings.shape)}")
    b = embeddings.shape[0]
    for name, t in (("correct/rewards", correct), ("group_ids", group_ids)):
        if t.dim() != 1 or t.shape[0] != b:
            raise ValueError(
                f"{name} must be [B]={b} to match embeddings, got shape {tuple(t.shape)}"
            )
    if not embeddings.dtype.is_floating_point:
        raise ValueError(f"embeddings must be floating point, got {embeddings.dtype}")
    # A row sum is non-finite iff the row has NaN/inf (barring 1e38 overflow);
    # one reduction instead of an elementwise isfinite over [B, d].
    if not bool(torch.isfinite(embeddings.detach().sum(-1)).all()):
        finite = torch.isfinite(embeddings.detach()).all(-1)
        rows = torch.nonzero(~finite).flatten()[:8].tolist()
        raise ValueError(
            f"embeddings contain NaN/inf at rows {rows} (check the pooled hidden states)"
        )


def _layout(
    embeddings: torch.Tensor,
    correct: torch.Tensor,
    group_ids: GroupIds,
    cfg: CLIPOConfig,
    sample_ids: torch.Tensor | None,
    member: torch.Tensor | None,
) -> tuple[GroupLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check the inputs and lay the batch out per group, rows outside `member` as padding:
    (layout, [B] bool labels, sample ids, [B] bool members)."""
    group_ids = as_group_ids(group_ids, device=embeddings.device)
    _check_inputs(embeddings, correct, group_ids)
    labels = check_binary(correct)
    if sample_ids is None:
        sample_ids = torch.arange(embeddings.shape[0], device=embeddings.device)
    layout = GroupLayout.from_group_ids(
        group_ids, sort_keys=sample_ids, max_group_size=cfg.max_group_size
    )
    if member is None:
        return layout, labels, sample_ids, torch.ones_like(labels)
    member = member.to(device=embeddings.device, dtype=torch.bool)
    if member.shape != labels.shape:
        raise ValueError(f"member must be [B]={labels.shape[0]}, got {tuple(member.shape)}")
    return layout.restricted_to(member), labels, sample_ids, member


def _similarities(
    embeddings: torch.Tensor, layout: GroupLayout, cfg: CLIPOConfig, sum_reduce: SumReduce | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, d] -> (gram, sim), both [N, G, G]: gram the cosines (raw dot products for `dot`),
    sim = gram / tau."""
    # fp32 at least (bf16 activations are upcast); fp64 stays fp64 for reference checks.
    emb = embeddings if embeddings.dtype == torch.float64 else embeddings.float()
    e = layout.to_padded(emb, fill=None)  # [N, G, d], padding slots masked out downstream
    gram = torch.bmm(e, e.transpose(1, 2))  # [N, G, G] raw dot products (partial if d is sharded)
    if sum_reduce is not None:
        # The only collective: every downstream op is identical on all ranks, so
        # an all-reduce whose backward is the identity gives exact gradients.
        gram = sum_reduce(gram)
    if cfg.similarity == "cosine":
        # cos_ij = g_ij / (|e_i| |e_j|), norms from the Gram diagonal: no second
        # collective for a sharded head (padding slots have norm 0 -> guarded).
        inv = torch.rsqrt(torch.diagonal(gram, dim1=1, dim2=2).clamp_min(1e-24))  # [N, G]
        gram = gram * inv.unsqueeze(2) * inv.unsqueeze(1)
    return gram, gram / cfg.temperature


def _anchor_mean(
    loss_ng: torch.Tensor,
    anchor: torch.Tensor,
    layout: GroupLayout,
    local_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """[N, G] kernel output -> ([B] per-anchor loss, [B] anchors, anchor count, [] loss): the
    loss sums this rank's anchors and divides by the anchor count of the whole batch."""
    loss_ng = torch.where(anchor, loss_ng, torch.zeros_like(loss_ng))  # [N, G]
    per_sample = layout.from_padded(loss_ng)  # [B]
    anchor_b = layout.from_padded(anchor)  # [B]
    num_anchors = int(anchor_b.sum())
    counted = anchor_b if local_mask is None else anchor_b & local_mask.bool()
    loss = (per_sample * counted).sum() / max(num_anchors, 1)
    return per_sample, anchor_b, num_anchors, loss


def _positive_rows(layout: GroupLayout, pos_slot: torch.Tensor) -> torch.Tensor:
    """[N, G] sampled positive slots -> [N, G] their batch rows, -1 where none."""
    return torch.where(
        pos_slot >= 0,
        layout.index.gather(1, pos_slot.clamp_min(0)),
        torch.full_like(pos_slot, -1),
    )


@torch.no_grad()
def _pair_stats(
    gram: torch.Tensor,
    sim: torch.Tensor,
    pairs: GroupPairs,
    neg: torch.Tensor,
    lab: torch.Tensor,
    group_ok: torch.Tensor,
    layout: GroupLayout,
    cfg: CLIPOConfig,
) -> dict[str, torch.Tensor]:
    """Detached similarity sums and pair / group counts over valid groups, for the metrics."""
    cos = gram.detach() if cfg.similarity == "cosine" else sim.detach() * cfg.temperature
    okp = group_ok.view(-1, 1, 1)
    pp = pairs.pos & lab.unsqueeze(2) & okp  # correct-correct pairs in valid groups
    pn = neg & lab.unsqueeze(2) & okp  # correct-incorrect pairs in valid groups
    return {
        "pos_sim_sum": (cos * pp).sum(),
        "pos_pairs": pp.sum().to(cos.dtype),
        "neg_sim_sum": (cos * pn).sum(),
        "neg_pairs": pn.sum().to(cos.dtype),
        "valid_groups": group_ok.sum().to(cos.dtype),
        "groups": torch.tensor(float(layout.num_groups), device=gram.device),
    }


def group_contrastive_loss(
    embeddings: torch.Tensor,
    correct: torch.Tensor,
    group_ids: GroupIds,
    cfg: CLIPOConfig,
    *,
    step: int = 0,
    sample_ids: torch.Tensor | None = None,
    local_mask: torch.Tensor | None = None,
    sum_reduce: SumReduce | None = None,
    member: torch.Tensor | None = None,
) -> ContrastiveResult:
    """CLIPO group contrastive loss on a (possibly ragged) batch of rollouts.

    embeddings: [B, d] head outputs (or a TP shard [B, d/tp] with `sum_reduce`).
    correct: [B] binary rewards / correctness. group_ids: [B] one id per prompt: ints,
        or any hashable ids such as verl's str `uid` (mapped by `as_group_ids`).
    sample_ids: [B] unique-in-group ids keying the positive draw (default arange(B));
        pass global rollout ids so every sharding draws the same positive.
    local_mask: [B] bool, which anchors this rank's `loss` sums (default all);
        the loss is always divided by the anchor count of the whole batch.
    sum_reduce: completes the per-group Gram [N, G, G] of raw dot products over a
        sharded embedding dim (a TP all-reduce with identity backward); norms for
        the cosine come from its diagonal, so it is the one collective.
    member: [B] bool, the rows in the contrastive set (default all); the drivers pass the rows
        that pooled at least one token (`megatron/pooling/masked_mean.py`, `empty_rows`).
    """
    layout, labels, sample_ids, member = _layout(
        embeddings, correct, group_ids, cfg, sample_ids, member
    )
    gram, sim = _similarities(embeddings, layout, cfg, sum_reduce)  # [N, G, G]
    lab = layout.to_padded(labels, fill=False)  # [N, G]
    group_ok = valid_groups(lab, layout.slot_valid)  # [N]
    pairs, neg = build_group_pairs(sim, lab, layout, sample_ids, cfg, step)
    loss_ng = get_contrastive_loss(cfg.loss_type).kernel(pairs)  # [N, G]
    per_sample, anchor_b, num_anchors, loss = _anchor_mean(
        loss_ng, pairs.anchor, layout, local_mask
    )
    return ContrastiveResult(
        loss=loss,
        per_sample_loss=per_sample,
        anchor_mask=anchor_b,
        # Authors: only correct anchors are rewarded; incorrect ones only shape the head.
        reward_mask=anchor_b if cfg.reward_incorrect_anchors else anchor_b & labels,
        valid_group=layout.from_padded(group_ok.unsqueeze(1).expand_as(pairs.anchor)) & member,
        positive_index=layout.from_padded(_positive_rows(layout, pairs.pos_slot)),
        num_anchors=num_anchors,
        stats=_pair_stats(gram, sim, pairs, neg, lab, group_ok, layout, cfg),
        member=member,
    )
