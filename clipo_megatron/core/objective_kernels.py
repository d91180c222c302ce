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
                    one term per sequence, spread over its tokens; GMPO's own definition (and the
                    authors' verl `geo_mean`) averages the terms over sequences.
Dual clip (`ratio_clip_c` = c > 1, Ye et al. 2019): for A < 0 the policy term is capped at
-c * A, i.e. l_t = min(l_t, -c A) -- NeMo-RL ClippedPGLossFn's and verl's rule.
Optional KL to a reference policy (k3 estimator, per token), NeMo-RL's `calculate_kl` clamps:
    d_t = clamp(ref_t - logp_t, -20, 20),  k3_t = exp(d_t) - d_t - 1,  kl_t = clamp(w_t * k3_t, max=10),
added as kl_coef * kl_t. Its gradient (`kl_gradient`):
  "kl": w_t = exp(logp_t - sg(logp_t)) (value 1; sg(w) where d was clamped): value k3, gradient
        kl_coef * (logp_t - ref_t), the score-function gradient of KL(pi || ref) -- NeMo-RL's
        ClippedPGLossFn with use_on_policy_kl_approximation off (the default);
  "k3": w_t = 1: k3's own gradient kl_coef * (1 - exp(ref_t - logp_t)) -- verl's low_var_kl.

Aggregation ("token-mean": sum over every valid token / number of tokens;
"seq-mean-token-mean": sum over sequences of the per-sequence token mean / number of rows).
Rows without response tokens add 0 but count in the sequence denominator, as NeMo-RL's
global_valid_seqs (sum of sample_mask) and verl's geo_mean (torch.mean over rows) count them.
`num_tokens` / `num_seqs` override the normalisers so data-parallel shards
sum to the global loss (NeMo-RL's global_valid_toks / global_valid_seqs).
"""

from __future__ import annotations

from typing import Literal

import torch

Aggregation = Literal["token-mean", "seq-mean-token-mean"]
AGGREGATIONS = ("token-mean", "seq-mean-token-mean")
KL_GRADIENTS = ("kl", "k3")
# NeMo-RL's kl_input_clamp_value / kl_output_clamp_value defaults, verl low_var_kl's bounds:
KL_INPUT_CLAMP = 20.0  # |ref - logp| bound before exp
KL_OUTPUT_CLAMP = 10.0  # per-token KL bound


def check_settings(aggregation: str, kl_gradient: str, ratio_clip_c: float | None) -> None:
    """The objective settings' domains (one error each, naming the setting)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if kl_gradient not in KL_GRADIENTS:
        raise ValueError(f"kl_gradient must be one of {KL_GRADIENTS}, got {kl_gradient!r}")
    if ratio_clip_c is not None and not ratio_clip_c > 1:
        raise ValueError(f"ratio_clip_c (dual clip) must be > 1 or None, got {ratio_clip_c}")


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
    seq_mean = (per_tok * m).sum(1) / m.sum(1).clamp_min(1)  # [B]; 0 for a row without tokens
    rows = max(m.shape[0], 1) if num_seqs is None else float(num_seqs)
    return seq_mean.sum() / rows


def dual_clip(per_tok: torch.Tensor, advantages: torch.Tensor, ratio_clip_c: float | None):
    """Cap the policy term at -c * A where A < 0 (no-op for c None). per_tok [B, T], advantages [B]."""
    if ratio_clip_c is None:
        return per_tok
    a = advantages.unsqueeze(1)  # [B, 1]
    return torch.where(a < 0, torch.minimum(per_tok, -a * ratio_clip_c), per_tok)


def kl_terms(logprobs, ref_logprobs, m, kl_gradient: str) -> torch.Tensor:
    """Per-token k3 KL to the reference [B, T], NeMo-RL's clamps; gradient form per `kl_gradient`."""
    d_raw = (ref_logprobs.detach() - logprobs) * m  # [B, T]
    d = d_raw.clamp(-KL_INPUT_CLAMP, KL_INPUT_CLAMP)
    k3 = torch.exp(d) - d - 1  # >= 0
    if kl_gradient == "kl":  # value 1, gradient of log p; frozen where the input clamp bit
        w = torch.exp(logprobs - logprobs.detach())  # [B, T]
        k3 = torch.where(d_raw == d, w, w.detach()) * k3
    return k3.clamp(-KL_OUTPUT_CLAMP, KL_OUTPUT_CLAMP)


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
    kl_gradient: str = "kl",
    ratio_clip_c: float | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss (scalar, to minimise) of one objective's per-token `terms` kernel, and metrics
    pg/clip_frac, pg/ratio_mean, pg/approx_kl (+ pg/kl_ref with a reference policy)."""
    check_settings(aggregation, kl_gradient, ratio_clip_c)
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip ranges must be >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    if kl_coef and ref_logprobs is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logprobs; pass them or set kl_coef=0")
    _check(logprobs, old_logprobs, advantages, mask, ref_logprobs)

    m = mask.to(logprobs.dtype)  # [B, T]
    log_ratio = (logprobs - old_logprobs.detach()) * m  # [B, T]
    adv = advantages.to(logprobs.dtype)  # [B]
    per_tok, ratio, clipped = terms(log_ratio, logprobs, adv, m, eps_low, eps_high)
    per_tok = dual_clip(per_tok, adv, ratio_clip_c)

    if ref_logprobs is not None:
        kl_tok = kl_terms(logprobs, ref_logprobs, m, kl_gradient)  # [B, T]
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
