# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A test stand-in for NeMo-RL's GRPOAdvantageEstimator, on `clipo_megatron.core`.

The quick tests wrap it with `ClipoAdvantageEstimator` where NeMo-RL is not
installed; `test_against_nemo_rl.py` checks it against NeMo-RL's own estimator.
"""

from __future__ import annotations

from typing import Any

import torch

from clipo_megatron.core.advantages import group_advantages
from clipo_megatron.nemo_rl.advantage_estimator import group_ids_from_prompts


class GroupNormalizedEstimator:
    """GRPOAdvantageEstimator semantics: returns [B, S] advantages (the per-sample value
    expanded over the mask's shape, as NeMo-RL does; the loss applies the mask)."""

    def __init__(self, *, normalize_rewards: bool = True, use_leave_one_out_baseline: bool = True):
        self.normalize_rewards = normalize_rewards
        self.use_leave_one_out_baseline = use_leave_one_out_baseline

    def compute_advantage(self, prompt_ids, rewards, mask, **_: Any) -> torch.Tensor:
        adv = group_advantages(
            rewards.double(),
            group_ids_from_prompts(prompt_ids),
            normalize_std=self.normalize_rewards,
            leave_one_out=self.use_leave_one_out_baseline,
        )  # [B]
        return adv.float().unsqueeze(-1).expand(mask.shape)
