# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Clipped policy-gradient objective (GRPO / PPO-clip, DAPO's asymmetric clip), token-mean.

L = -mean_t min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A),
rho_t = exp(logp_t - old_logp_t), averaged over the response tokens of the
batch (token-mean, paper App. GRPO/DAPO). With one update per batch the
ratio is 1 and the gradient is the plain policy gradient.
"""

from __future__ import annotations

import torch


def clipped_pg_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, *, eps_low: float = 0.2, eps_high: float = 0.2
                    ) -> tuple[torch.Tensor, dict[str, float]]:
    """logprobs/old_logprobs/mask [B, T], advantages [B] -> (loss, metrics)."""
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
                         f"mask {tuple(mask.shape)} must match")
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be [B]={logprobs.shape[0]}, got {tuple(advantages.shape)}")
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip ranges must be >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    m = mask.float()
    ratio = torch.exp(logprobs - old_logprobs.detach())  # [B, T]
    a = advantages.unsqueeze(1)  # [B, 1]
    surr = torch.minimum(ratio * a, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * a)
    ntok = m.sum().clamp_min(1)
    loss = -(surr * m).sum() / ntok
    with torch.no_grad():
        clipped = ((ratio < 1 - eps_low) | (ratio > 1 + eps_high)).float()
        metrics = {"pg/clip_frac": float((clipped * m).sum() / ntok), "pg/ratio_mean": float((ratio * m).sum() / ntok)}
    return loss, metrics
