# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The math of the policy objectives the paper compares (App. "baseline objectives").

Kernels only: which objective uses which ratio form, clip range and
aggregation is decided in one place, the registry `core/objectives.py`.

Shapes: logprobs / old_logprobs / ref_logprobs / mask [B, T], advantages [B].
log rho_t = logp_t - old_logp_t (old detached).

- grpo (PPO-clip):  l_t = -min(rho_t A, clip(rho_t, 1-eps_low, 1+eps_high) A),  eps 0.2/0.2.
- dapo:             same with the asymmetric clip eps_low 0.2, eps_high 0.28, token-mean.
- gspo:             sequence ratio s_i = exp(mean_t log rho_t); token form
                    rho'_t = sg(s_i) * exp(logp_t - sg(logp_t)) (value s_i, gradient
                    s_i * grad mean_t logp_t); clip 3e-4 / 4e-4; seq-mean-token-mean.
- gmpo:             geometric mean of clipped token ratios, clip in log space
                    (eps 0.4): with sg = sign(A),
                    l_i = -A_i * exp(mean_t sg * min(sg * log rho_t, sg * clip(log rho_t, -eps_low, eps_high)));
                    one term per sequence, spread over its tokens; the paper (App. GMPO)
                    aggregates with token-mean (longer sequences weigh more).
Optional KL to a reference policy (k3 estimator, per token):
    kl_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1,  added as kl_coef * kl_t.

Aggregation ("token-mean": sum over every valid token / number of tokens;
"seq-mean-token-mean": mean over sequences of the per-sequence token mean).
`num_tokens` / `num_seqs` override the normalisers so data-parallel shards
sum to the global loss (NeMo-RL's global_valid_toks / global_valid_seqs).
"""

from __future__ import annotations

from typing import Literal

import torch

Aggregation = Literal["token-mean", "seq-mean-token-mean"]
AGGREGATIONS = ("token-mean", "seq-mean-token-mean")


def _check(logprobs, old_logprobs, advantages, mask, ref_logprobs) -> None:
    if logprobs.dim() != 2 or logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
            f"mask {tuple(mask.shape)} must match (all [B, T])"
        )
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(
            f"advantages must be [B]={logprobs.shape[0]}, got {tuple(advantages.shape)}"
        )
    if ref_logprobs is not None and ref_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"ref_logprobs {tuple(ref_logprobs.shape)} must match logprobs {tuple(logprobs.shape)}"
        )


def _aggregate(
    per_tok: torch.Tensor, m: torch.Tensor, aggregation: str, num_tokens, num_seqs
) -> torch.Tensor:
    if aggregation == "token-mean":
        denom = m.sum().clamp_min(1) if num_tokens is None else torch.as_tensor(float(num_tokens))
        return (per_tok * m).sum() / denom
    seq_tok = m.sum(1)  # [B]
    seq_mean = (per_tok * m).sum(1) / seq_tok.clamp_min(1)  # [B]
    has = (seq_tok > 0).to(per_tok.dtype)
    denom = has.sum().clamp_min(1) if num_seqs is None else torch.as_tensor(float(num_seqs))
    return (seq_mean * has).sum() / denom


def ppo_clip_terms(log_ratio, logprobs, advantages, m, eps_low, eps_high):
    """GRPO / DAPO: per-token ratio rho_t, clipped to [1 - eps_low, 1 + eps_high]."""
    a = advantages.unsqueeze(1)  # [B, 1]
    ratio = torch.exp(log_ratio)  # [B, T]
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_tok = -torch.minimum(ratio * a, clipped_ratio * a)  # [B, T]
    return per_tok, ratio, (ratio < 1 - eps_low) | (ratio > 1 + eps_high)


def gspo_terms(log_ratio, logprobs, advantages, m, eps_low, eps_high):
    """GSPO: the sequence ratio s_i = exp(mean_t log rho_t) on every token, value s_i,
    gradient s_i * grad mean_t logp_t (token form sg(s_i) * exp(logp_t - sg(logp_t)))."""
    a = advantages.unsqueeze(1)  # [B, 1]
    seq_log = (log_ratio.sum(1) / m.sum(1).clamp_min(1)).unsqueeze(1)  # [B, 1]
    ratio = torch.exp(seq_log.detach() + logprobs - logprobs.detach())  # [B, T], value s_i
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_tok = -torch.minimum(ratio * a, clipped_ratio * a)  # [B, T]
    return per_tok, ratio, (ratio < 1 - eps_low) | (ratio > 1 + eps_high)


def gmpo_terms(log_ratio, logprobs, advantages, m, eps_low, eps_high):
    """GMPO: geometric mean of the token ratios clipped in log space, one term per
    sequence spread over its tokens (token-mean then weighs longer sequences more)."""
    sgn = torch.sign(advantages).unsqueeze(1)  # [B, 1]
    lr_clip = torch.clamp(log_ratio, -eps_low, eps_high)  # [B, T]
    lr_min = sgn * torch.minimum(sgn * log_ratio, sgn * lr_clip)  # [B, T]
    seq_ratio = torch.exp((lr_min * m).sum(1) / m.sum(1).clamp_min(1))  # [B]
    per_tok = (-advantages * seq_ratio).unsqueeze(1).expand_as(m)  # [B, T]
    return per_tok, torch.exp(log_ratio), (log_ratio < -eps_low) | (log_ratio > eps_high)


def objective_loss(
    terms,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    aggregation: str,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss (scalar, to minimise) of one objective's per-token `terms` kernel, and metrics
    pg/clip_frac, pg/ratio_mean, pg/approx_kl (+ pg/kl_ref with a reference policy)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip ranges must be >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    if kl_coef and ref_logprobs is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logprobs; pass them or set kl_coef=0")
    _check(logprobs, old_logprobs, advantages, mask, ref_logprobs)

    m = mask.to(logprobs.dtype)  # [B, T]
    log_ratio = (logprobs - old_logprobs.detach()) * m  # [B, T]
    adv = advantages.to(logprobs.dtype)  # [B]
    per_tok, ratio, clipped = terms(log_ratio, logprobs, adv, m, eps_low, eps_high)

    if ref_logprobs is not None:
        d = (ref_logprobs.detach() - logprobs) * m  # [B, T]
        kl_tok = torch.exp(d) - d - 1  # k3 estimator, >= 0
        if kl_coef:
            per_tok = per_tok + kl_coef * kl_tok
    loss = _aggregate(per_tok, m, aggregation, num_tokens, num_seqs)

    with torch.no_grad():
        ntok = m.sum().clamp_min(1)
        metrics = {
            "pg/clip_frac": float((clipped.to(m.dtype) * m).sum() / ntok),
            "pg/ratio_mean": float((ratio * m).sum() / ntok),
            # k3 estimate of KL(old || new) per token
            "pg/approx_kl": float(((torch.exp(-log_ratio) + log_ratio - 1) * m).sum() / ntok),
        }
        if ref_logprobs is not None:
            metrics["pg/kl_ref"] = float((kl_tok * m).sum() / ntok)
    return loss, metrics
