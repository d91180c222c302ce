# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One batch through both drivers' policy losses: the runner's `PolicyLoss` and what the NeMo-RL
driver builds (`build_policy_loss`), loss and gradient with respect to the logprobs.

The batch fires every branch the two must agree on: the PPO clip both ways, the dual clip
(A < 0, ratio > 3), an on-policy row (ratio 1: GSPO's tiny clip leaves it unclipped), a
row with no response tokens, and a KL term whose input (|ref - logp| > 20) and output
(k3 > 10) clamps bite. Uses only names that main had before issue 17, so
`scripts/loss_parity.py --src <old checkout>` measures the "before".
"""

from __future__ import annotations

import torch

KL_COEF = 0.05  # every objective gets a KL term here (grpo's paper value is 0.001)
ADVANTAGES = (0.9, -1.3, 0.4, -0.7, 1.1, -0.5)  # [B]; row 5 has no response tokens


def parity_batch(seed: int = 0, s: int = 10) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """logprobs [B, S-1] (a leaf, fp64) and NeMo-RL's data dict ([B, S], position 0 dropped)."""
    b = len(ADVANTAGES)
    gen = torch.Generator().manual_seed(seed)
    lp = -torch.rand(b, s, generator=gen, dtype=torch.float64) * 2  # [B, S]
    prev = lp + (torch.rand(b, s, generator=gen, dtype=torch.float64) - 0.5) * 1.2
    prev[1, 3:6] = lp[1, 3:6] - 1.5  # A < 0 and ratio e^1.5 > 3: the dual clip
    prev[3] = lp[3]  # on-policy row: ratio 1
    ref = lp + (torch.rand(b, s, generator=gen, dtype=torch.float64) - 0.5) * 0.8
    ref[0, 4] = lp[0, 4] - 25.0  # KL input clamp (|ref - logp| > 20)
    ref[2, 5] = lp[2, 5] + 3.0  # KL output clamp: e^3 - 3 - 1 > 10
    token_mask = torch.zeros(b, s, dtype=torch.float64)
    for i in range(b - 1):
        token_mask[i, 2 + i % 2 : s - i % 3] = 1  # prompts of 2-3 tokens, ragged ends
    adv = torch.tensor(ADVANTAGES, dtype=torch.float64)
    data = {
        "token_mask": token_mask,
        "sample_mask": torch.ones(b, dtype=torch.float64),
        "prev_logprobs": prev,
        "generation_logprobs": prev,
        "reference_policy_logprobs": ref,
        "advantages": adv.unsqueeze(1).expand(b, s).clone(),
        "input_ids": torch.zeros(b, s, dtype=torch.long),
    }
    return lp[:, 1:].clone().requires_grad_(True), data


def runner_loss(objective: str, lp: torch.Tensor, data: dict, kl_coef: float = KL_COEF, **fields):
    """The runner's PolicyLoss over two micro-batches (summed), and d loss / d lp [B, S-1]."""
    from dataclasses import replace

    from clipo_megatron.core.objectives import get_objective
    from clipo_megatron.runner.passes import PolicyLoss, UpdateBatch

    mask = data["token_mask"][:, 1:] > 0  # [B, S-1]
    whole = UpdateBatch(
        data["input_ids"][:, 1:],
        mask,
        data["prev_logprobs"][:, 1:],
        data["advantages"][:, 0],
        data["reference_policy_logprobs"][:, 1:],
    )
    loss_fn = PolicyLoss(replace(get_objective(objective), **fields), None, None, kl_coef)
    half = lp.shape[0] // 2
    rows = (torch.arange(half), torch.arange(half, lp.shape[0]))
    loss = sum(loss_fn(lp[r], whole.rows(r), whole)[0] for r in rows)
    (grad,) = torch.autograd.grad(loss, lp)
    return float(loss.detach()), grad


def driver_loss(objective: str, lp: torch.Tensor, data: dict, kl_coef: float = KL_COEF, **keys):
    """What the NeMo-RL driver builds for the objective's recipe keys (+ `keys`), called with
    NeMo-RL's global counts; its loss and d loss / d lp [B, S-1]. Returns the loss class too."""
    from clipo_megatron.nemo_rl.loss_functions import build_policy_loss, policy_loss_config

    cfg = {**policy_loss_config(objective), "reference_policy_kl_penalty": kl_coef, **keys}
    fn = build_policy_loss(objective, cfg)
    try:  # ClippedPGLossFn reads a BatchedDataDict; ObjectiveLossFn a plain dict
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        batch = BatchedDataDict(data)
    except ImportError:
        batch = data
    mask = (data["token_mask"] * data["sample_mask"].unsqueeze(1))[:, 1:]
    loss, _ = fn(lp, batch, data["sample_mask"].sum(), mask.sum())
    (grad,) = torch.autograd.grad(loss, lp)
    return float(loss.detach()), grad, type(fn).__name__
