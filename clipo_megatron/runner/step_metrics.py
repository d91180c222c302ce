# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner's per-step metrics (metrics.jsonl / TensorBoard) from the numbers a step has.

Rewards, the verifier's answers per status (ok, timeout, killed, error, too_long: a timed-out
answer scores 0 and must show), the sampled tokens' hash (compare's divergence step) and, with
CLIPO on, whether CLIPO changed the update (`core/diagnostics.py`: A(r) beside the A(r') the
update trains on).
"""

from __future__ import annotations

import torch

from clipo_megatron.core.advantages import group_advantages
from clipo_megatron.core.diagnostics import update_diagnostics
from clipo_megatron.core.rewards import shaped_rewards
from clipo_megatron.runner.rollouts import token_hash


def reward_metrics(
    step: int, rewards, r_cl, mask, response_ids, t: dict, verify: dict[str, int] | None = None
) -> dict:
    """rewards [B], r_cl [B] (0 where filtered), mask [B, S], the verifier's answers per status
    -> the step's scalar metrics (`verify/<status>`: every status, zeros too) and
    `rollout/token_hash` (a str: metrics.jsonl only, not TensorBoard)."""
    shaped = shaped_rewards(rewards, r_cl)  # [B] r' = r + r_CL
    return {
        **{f"verify/{k}": float(v) for k, v in (verify or {}).items()},
        "step": step,
        "reward/mean": float(rewards.mean()),
        "reward/clipo_mean": float(r_cl.mean()),
        "reward/shaped_mean": float(shaped.mean()),
        "response/mean_tokens": float(mask.sum(1).float().mean()),
        "rollout/token_hash": token_hash(response_ids),
        **{f"time/{k}": v for k, v in t.items()},
    }


def clipo_diagnostics(rewards, r_cl, adv, correct, group_ids) -> dict[str, float]:
    """The kept rows' rewards [b], r_cl [b], the advantages trained on A(r') [b], correct [b],
    group ids [b] -> clipo/r_cl_spread, clipo/adv_share, clipo/ranked_frac."""
    a0 = group_advantages(rewards, group_ids)  # [b] A(r), what the objective alone trains on
    return update_diagnostics(a0, adv, r_cl, torch.as_tensor(correct), group_ids)
