# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO method core: pure torch, no Megatron or NeMo-RL import."""

from clipo_megatron.core.advantages import (
    DynamicSamplingResult,
    dynamic_sampling_filter,
    group_advantages,
)
from clipo_megatron.core.config import ClipoBlock, CLIPOConfig
from clipo_megatron.core.contrastive_kernels import (
    CONTRASTIVE_LOSSES,
    ContrastiveLoss,
    get_contrastive_loss,
    register_contrastive_loss,
)
from clipo_megatron.core.contrastive_loss import (
    ContrastiveResult,
    check_binary,
    group_contrastive_loss,
    l2_normalize,
)
from clipo_megatron.core.groups import GroupLayout, as_group_ids
from clipo_megatron.core.metrics import contrastive_metrics
from clipo_megatron.core.objectives import (
    OBJECTIVES,
    Objective,
    get_objective,
    policy_objective_loss,
    register_objective,
)
from clipo_megatron.core.rewards import contrastive_rewards, shaped_rewards
from clipo_megatron.core.sampling import counter_uniform, sample_positive_slots

__all__ = [
    "CLIPOConfig",
    "DynamicSamplingResult",
    "ClipoBlock",
    "CONTRASTIVE_LOSSES",
    "ContrastiveLoss",
    "get_contrastive_loss",
    "register_contrastive_loss",
    "OBJECTIVES",
    "Objective",
    "get_objective",
    "register_objective",
    "dynamic_sampling_filter",
    "group_advantages",
    "policy_objective_loss",
    "ContrastiveResult",
    "GroupLayout",
    "as_group_ids",
    "check_binary",
    "contrastive_metrics",
    "contrastive_rewards",
    "counter_uniform",
    "group_contrastive_loss",
    "l2_normalize",
    "sample_positive_slots",
    "shaped_rewards",
]
