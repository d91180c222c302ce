# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The policy objectives, in one registry: name -> loss kernel + paper defaults + filter.

Both drivers select an objective by one key, `clipo.objective`, and read
everything about it here: the single-machine runner calls `Objective.loss`;
the NeMo-RL driver (`nemo_rl/loss_functions.py`) translates the fields into NeMo-RL's
`ClippedPGLossFn` settings where NeMo-RL computes the objective (`in_nemo_rl`),
and wraps `Objective.loss` in the LossFunction protocol where it does not (GMPO,
or the k3 KL gradient). CLIPO on or off is a separate switch (`clipo.enabled`):
"GRPO" is `objective=grpo` with CLIPO off.

Adding a fifth objective is one `register_objective(...)` call with a
per-token kernel in the form of `core/objective_kernels.py`'s.

Paper defaults (App. "baseline objectives"; dual clip and GMPO's sequence mean as in the
authors' verl, Qwen-Applications/CLIPO core_algos.py):
  grpo  PPO-clip, eps 0.2 / 0.2, dual clip 3, token-mean, KL 0.001 (k3) to the reference;
  dapo  PPO-clip, eps 0.2 / 0.28 (clip-higher), dual clip 3, token-mean, no KL, dynamic sampling;
  gspo  sequence-level ratio, eps 3e-4 / 4e-4, seq-mean-token-mean, no KL;
  gmpo  geometric mean of log-space-clipped token ratios, eps 0.4 / 0.4, mean over sequences, no KL.
Every objective's KL term takes the "kl" gradient (NeMo-RL's) unless `kl_gradient="k3"`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from clipo_megatron.core.advantages import DynamicSamplingResult, dynamic_sampling_filter
from clipo_megatron.core.objective_kernels import (
    check_settings,
    gmpo_terms,
    gspo_terms,
    objective_loss,
    ppo_clip_terms,
)
from clipo_megatron.core.registry import Registry


@dataclass(frozen=True)
class Objective:
    """One policy objective and the defaults the paper runs it with."""

    name: str
    # (log_ratio, logprobs, advantages, mask, eps_low, eps_high) -> (per_tok, ratio, clipped)
    terms: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    eps_low: float
    eps_high: float
    aggregation: str  # "token-mean" | "seq-mean-token-mean"
    kl_coef: float  # k3 KL penalty to the reference policy
    # Dual clip c (> 1): the policy term is capped at -c * A for A < 0; None: off.
    ratio_clip_c: float | None = None
    # The KL term's gradient: "kl" (value k3, gradient logp - ref) | "k3" (k3's own gradient).
    kl_gradient: str = "kl"
    # DAPO's filter: drop groups whose rewards are all equal (zero advantage, no signal).
    dynamic_sampling: bool = False
    # NeMo-RL's ClippedPGLossFn computes it (else this package's ObjectiveLossFn does).
    in_nemo_rl: bool = True
    # ClippedPGLossFn's switch for a sequence-level ratio (GSPO).
    sequence_level_ratio: bool = False
    summary: str = ""

    def __post_init__(self) -> None:
        try:
            check_settings(self.aggregation, self.kl_gradient, self.ratio_clip_c)
        except ValueError as e:
            raise ValueError(f"objective {self.name}: {e}") from None

    def loss(
        self,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        eps_low: float | None = None,
        eps_high: float | None = None,
        aggregation: str | None = None,
        ref_logprobs: torch.Tensor | None = None,
        kl_coef: float | None = None,
        kl_gradient: str | None = None,
        ratio_clip_c: float | None = None,
        num_tokens: float | None = None,
        num_seqs: float | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The objective's loss with its paper defaults for every knob left as None.

        logprobs / old_logprobs / mask [B, T], advantages [B]. `kl_coef=None` takes the
        objective's default only when `ref_logprobs` are given (no reference, no KL term).
        `ratio_clip_c=None` takes the objective's dual clip (off: `dataclasses.replace(obj, ratio_clip_c=None)`).
        """
        if kl_coef is None:
            kl_coef = self.kl_coef if ref_logprobs is not None else 0.0
        return objective_loss(
            self.terms,
            logprobs,
            old_logprobs,
            advantages,
            mask,
            eps_low=self.eps_low if eps_low is None else eps_low,
            eps_high=self.eps_high if eps_high is None else eps_high,
            aggregation=self.aggregation if aggregation is None else aggregation,
            ref_logprobs=ref_logprobs,
            kl_coef=kl_coef,
            kl_gradient=self.kl_gradient if kl_gradient is None else kl_gradient,
            ratio_clip_c=self.ratio_clip_c if ratio_clip_c is None else ratio_clip_c,
            num_tokens=num_tokens,
            num_seqs=num_seqs,
        )

    def filter_groups(
        self, rewards: torch.Tensor, group_ids: torch.Tensor
    ) -> DynamicSamplingResult | None:
        """The rows the policy update keeps (DAPO's dynamic sampling); None: keep all."""
        return dynamic_sampling_filter(rewards, group_ids) if self.dynamic_sampling else None


OBJECTIVES: Registry[Objective] = Registry(
    "objective", "objective {name!r} is not one of {choices} (set clipo.objective)"
)
register_objective = OBJECTIVES.register  # adds an objective both drivers read
get_objective = OBJECTIVES.lookup


def policy_objective_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    objective: str = "grpo",
    **overrides: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """`get_objective(objective).loss(...)`: keyword overrides as in `Objective.loss`."""
    return get_objective(objective).loss(logprobs, old_logprobs, advantages, mask, **overrides)


register_objective(
    Objective(
        "grpo",
        ppo_clip_terms,
        0.2,
        0.2,
        "token-mean",
        kl_coef=0.001,
        ratio_clip_c=3.0,
        summary="PPO-clip on token ratios, eps 0.2 / 0.2, dual clip 3, token-mean, k3 KL 0.001",
    )
)
register_objective(
    Objective(
        "dapo",
        ppo_clip_terms,
        0.2,
        0.28,
        "token-mean",
        kl_coef=0.0,
        ratio_clip_c=3.0,
        dynamic_sampling=True,
        summary="clip-higher eps 0.2 / 0.28, dual clip 3, token-mean, dynamic sampling, no KL",
    )
)
register_objective(
    Objective(
        "gspo",
        gspo_terms,
        3e-4,
        4e-4,
        "seq-mean-token-mean",
        kl_coef=0.0,
        sequence_level_ratio=True,
        summary="sequence-level ratio, eps 3e-4 / 4e-4, seq-mean-token-mean, no KL",
    )
)
register_objective(
    Objective(
        "gmpo",
        gmpo_terms,
        0.4,
        0.4,
        "seq-mean-token-mean",  # one term per sequence: the mean over sequences (verl geo_mean)
        kl_coef=0.0,
        in_nemo_rl=False,
        summary="geometric mean of token ratios clipped in log space, eps 0.4, mean over sequences",
    )
)
