# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What a contract run used, row by row, observed from test code: subclasses of the run's policy
class and of the CLIPO advantage estimator (and its head step) record, per GRPO step, the rows of the logprob pass,
the pooled states the head saw, NeMo-RL's rewards and prompt rows, CLIPO's positives, group ids
and r_CL, and the advantages `Policy.train` received (`clipo_checks` recomputes them)."""

from __future__ import annotations

from typing import Any

import torch


class Trace(list):
    """One dict per GRPO step of the per-row values the run used; `at_shutdown`: the workers'
    head state (CLIPO on) read as the policy shuts down (async_grpo_train shuts its policy down
    itself, before the caller could read it)."""

    at_shutdown: dict[str, Any] | None = None

    def record(self, *, new_step: bool = False, **values: Any) -> None:
        if new_step or not self:
            self.append({})
        self[-1].update(values)


def assemble_pooled(results: list[dict[str, Any]], batch_size: int) -> torch.Tensor:
    """Per-worker {rows, pooled [b, H]} -> [B, H] in batch order (replicas overwrite alike)."""
    parts = [r for r in results if r and r["rows"].numel()]
    out = torch.full((batch_size, parts[0]["pooled"].shape[1]), float("nan"))
    for r in parts:
        out[r["rows"].long()] = r["pooled"].float().cpu()
    return out


def tracing_policy_class(base: type, trace: Trace) -> type:
    """`base` (`make_clipo_policy_class`'s class) recording into `trace`."""

    class TracingPolicy(base):
        def get_logprobs(self, data, timer=None):
            if self.clipo_cfg.head_runs:  # the rows the pooled states come from
                keys = ("input_ids", "input_lengths", "token_mask")
                trace.record(new_step=True, **{k: data[k].clone() for k in keys})
            return super().get_logprobs(data, timer=timer)

        def train(self, data, loss_fn, *args, **kwargs):
            mask = data["token_mask"] * data["sample_mask"].unsqueeze(-1)  # [B, S]
            trace.record(advantages=data["advantages"].cpu().clone(), advantage_mask=mask)
            return super().train(data, loss_fn, *args, **kwargs)

        def shutdown(self, *args, **kwargs):
            if trace.at_shutdown is None and self.clipo_cfg.head_runs:  # the workers are up
                trace.at_shutdown = {"head": self.run_all_workers_single_data("clipo_head_state")}
            return super().shutdown(*args, **kwargs)

    if not hasattr(base, "get_logprobs_from_meta"):
        return TracingPolicy

    class TracingTQPolicy(TracingPolicy):
        """The TransferQueue loop's calls (the rows stay in TransferQueue: read them there)."""

        def get_logprobs_from_meta(self, meta, *args, **kwargs):
            if self.clipo_cfg.head_runs:
                keys = ["input_ids", "input_lengths", "token_mask"]
                data = self.read_from_dataplane(meta, select_fields=keys)
                trace.record(new_step=True, **{k: data[k].clone() for k in keys})
            return super().get_logprobs_from_meta(meta, *args, **kwargs)

        def train_from_meta(self, meta, loss_fn, *args, **kwargs):
            data = self.read_from_dataplane(
                meta, select_fields=["advantages", "token_mask", "sample_mask"]
            )
            mask = data["token_mask"] * data["sample_mask"].unsqueeze(-1)  # [B, S]
            trace.record(advantages=data["advantages"].cpu().clone(), advantage_mask=mask)
            return super().train_from_meta(meta, loss_fn, *args, **kwargs)

    return TracingTQPolicy


def traced_head_step(head_step: Any, trace: Trace) -> Any:
    """The run's `WorkersHeadStep` recording CLIPO's positives, group ids, r_CL and the pooled
    states the head saw (read from the workers after the step) into `trace`."""

    def step(correct, group_ids, step):
        out = head_step(correct, group_ids, step)
        pooled = head_step.run_all_workers("clipo_last_pooled")  # what the head saw
        trace.record(
            correct=correct.clone(),
            group_ids=group_ids.clone(),
            r_cl=out.rewards.detach().cpu().clone(),
            pooled=assemble_pooled(pooled, int(correct.numel())),
        )
        return out

    return step


def tracing_estimator(trace: Trace) -> type:
    """The CLIPO advantage estimator recording NeMo-RL's prompt rows and rewards, and its head
    step's rows (`traced_head_step`), into `trace`."""
    from clipo_megatron.nemo_rl.advantage_estimator import ClipoAdvantageEstimator

    class TracingEstimator(ClipoAdvantageEstimator):
        def __init__(self, base, head_step, *args, **kwargs):
            super().__init__(base, traced_head_step(head_step, trace), *args, **kwargs)

        def compute_advantage(self, prompt_ids, rewards, mask, **kwargs):
            if self.cfg.head_runs:
                trace.record(
                    prompt_ids=prompt_ids.detach().cpu().clone(),
                    rewards=rewards.detach().cpu().clone(),
                )
            return super().compute_advantage(prompt_ids, rewards, mask, **kwargs)

    return TracingEstimator
