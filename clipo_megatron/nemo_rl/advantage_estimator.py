# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Driver side of the GRPO step: contrastive rewards into the advantage estimator.

NeMo-RL's `grpo_train` (HEAD 7ea279a) calls, per step,
`adv_estimator.compute_advantage(prompt_ids=[B, S_prompt], rewards=[B], mask=[B, S], ...)`
after the logprob passes. `ClipoAdvantageEstimator` wraps the configured
GRPO estimator there:

    group_ids = unique rows of prompt_ids            (group identity from the prompt)
    correct   = clipo.is_correct(verifiable reward)  (CLIPO positives: reward >= threshold)
    r_CL      = head_step(correct, group_ids, step)  (workers: head on pooled states, update)
    r'        = r + r_CL                             (paper Sec. 3, before normalisation)
    A         = base.compute_advantage(prompt_ids, r', mask)
    diagnostics from A(r) = base.compute_advantage(prompt_ids, r, mask) beside A (core/diagnostics.py)
    verify/<status> = the verifier's answer counts, read from the environment's observations
                      (baseline too: a timed-out answer scored 0 is visible in both arms)

`head_step` is the one call out of this module: a `head_step.HeadStep` the driver builds over
the policy's workers (`head_step.py` holds that path: where its rows come from, how r_CL comes
back). Rows are in `train_data` order. With dynamic sampling (DAPO) NeMo-RL filters the batch
*before* the logprob pass, so the rows here are already the kept ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from clipo_megatron.core.diagnostics import update_diagnostics
from clipo_megatron.core.rewards import shaped_rewards
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.env_grading import status_metrics
from clipo_megatron.nemo_rl.head_step import HeadStep


def group_ids_from_prompts(prompt_ids: torch.Tensor) -> torch.Tensor:
    """[B, S] (padded prompt tokens) or [B] -> [B] long group ids, equal iff the prompt rows are equal.

    Same identity NeMo-RL's `calculate_baseline_and_std_per_prompt` uses
    (`torch.unique(prompts, dim=0)`); ids are the rank of the row among the
    unique rows, so they are deterministic and identical on every process.
    """
    if prompt_ids.dim() == 1:
        prompt_ids = prompt_ids.unsqueeze(1)
    if prompt_ids.dim() != 2:
        raise ValueError(f"prompt_ids must be [B, S] or [B], got {tuple(prompt_ids.shape)}")
    _, inverse = torch.unique(prompt_ids.cpu(), dim=0, return_inverse=True)
    return inverse.long()


def per_row(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] or [B, S] advantages -> [B]: the mean over each row's mask tokens (GRPO's estimator
    expands one value per row, so that value; a row with no mask token: its first column)."""
    if adv.dim() == 1:
        return adv
    m = mask.to(adv.dtype).expand_as(adv)  # [B, S]
    n = m.sum(1)  # [B]
    return torch.where(n > 0, (adv * m).sum(1) / n.clamp_min(1), adv[:, 0])


@dataclass
class ClipoRunState:
    """Shared between the estimator (driver) and the policy wrapper: the CLIPO step counter.

    `step` counts advantage computations, one per grpo_train step, so before a step's
    advantages it equals grpo_train's 0-based `total_steps` (restored on resume from the head's
    checkpoint, in the baseline from `policy.RUN_STATE_FILE`: the verifier metrics' step). The
    warm-up rule is `ClipoBlock.policy_updates_at(step)`.
    """

    step: int = 0  # CLIPO steps completed (advantage computations)
    last_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def trained_step(self) -> int:
        """The 0-based step the policy's train() is in: its advantages were the last computed."""
        if self.step < 1:
            raise RuntimeError("policy train() before any advantage computation of this run")
        return self.step - 1

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state["step"])


class ClipoAdvantageEstimator:
    """Wraps an advantage estimator: r' = r + r_CL before its group normalisation; r_CL from
    `head_step`, called once per step with CLIPO on (`head_step.py`: the workers' head step)."""

    def __init__(
        self,
        base,
        head_step: HeadStep,
        cfg: ClipoNemoRLConfig,
        state: ClipoRunState,
        *,
        metrics_sink: Callable[[dict[str, float], int], None] | None = None,
    ):
        self.base = base
        self.head_step = head_step
        self.cfg = cfg
        self.state = state
        self.metrics_sink = metrics_sink

    def compute_advantage(self, prompt_ids, rewards, mask, **kwargs: Any) -> torch.Tensor:
        rb = kwargs.get("repeated_batch")
        # The verifier's statuses ride in the environment's observations (nemo_rl/env_grading).
        verify = status_metrics(rb["message_log"]) if rb is not None and "message_log" in rb else {}
        if not self.cfg.head_runs:  # the baseline: no head, r' = r
            self.state.last_metrics = verify
            if self.metrics_sink is not None and verify:
                self.metrics_sink(verify, self.state.step + 1)
            self.state.step += 1
            return self.base.compute_advantage(
                prompt_ids=prompt_ids, rewards=rewards, mask=mask, **kwargs
            )
        verifiable = rewards
        if (
            rb is not None
            and "unshaped_total_reward" in rb
            and len(rb["unshaped_total_reward"]) == len(rewards)
        ):
            verifiable = torch.as_tensor(
                rb["unshaped_total_reward"]
            )  # positives from the raw task reward
        group_ids = group_ids_from_prompts(prompt_ids)  # [B]
        correct = self.cfg.is_correct(verifiable)  # [B]
        out = self.head_step(correct, group_ids, self.state.step)
        r_cl = out.rewards.to(rewards.device)  # [B]
        shaped = shaped_rewards(rewards, r_cl).to(rewards.dtype)  # [B] r' = r + r_CL
        a_shaped = self.base.compute_advantage(
            prompt_ids=prompt_ids, rewards=shaped, mask=mask, **kwargs
        )  # A(r'), [B, S]
        a_plain = self.base.compute_advantage(
            prompt_ids=prompt_ids, rewards=rewards, mask=mask, **kwargs
        )  # A(r) by the same estimator: what GRPO alone would train on
        metrics = dict(out.metrics)
        metrics.update(
            update_diagnostics(
                per_row(a_plain, mask).detach().cpu(),
                per_row(a_shaped, mask).detach().cpu(),
                r_cl.detach().cpu(),
                correct.cpu(),
                group_ids,
            )
        )
        metrics["clipo/reward_verifiable_mean"] = float(verifiable.float().mean())
        metrics["clipo/reward_shaped_mean"] = float(shaped.float().mean())
        metrics["clipo/policy_updated"] = float(self.cfg.policy_updates_at(self.state.step))
        metrics.update(verify)
        self.state.last_metrics = metrics
        if self.metrics_sink is not None:
            self.metrics_sink(metrics, self.state.step + 1)
        self.state.step += 1
        return a_shaped
