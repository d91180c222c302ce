# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The math / multiple-choice environment as a NeMo-RL Ray actor (imported where NeMo-RL is installed).

Registered as env `clipo_math` by `data.register_with_nemo_rl()`. Each step
scores the last assistant message of every rollout against
`metadata["ground_truth"]` (math-verify for math, letter match for `clipo_kind`
"mc": MMLU / TruthfulQA / CommonsenseQA) in the verifier pool
(`clipo_megatron.verify.pool`): one answer per worker process under a per-answer
deadline, so a hostile answer costs only itself. Each answer's status rides in its
observation (`env_grading`) and is counted into the step's `verify/<status>` metrics.
Config keys (`env.clipo_math`): num_workers, timeout, max_answer_chars.
"""

from __future__ import annotations

from typing import Any

import ray
import torch
from nemo_rl.environments.interfaces import EnvironmentInterface, EnvironmentReturn

from clipo_megatron.nemo_rl.env_grading import EnvSettings, grade_messages, status_metrics
from clipo_megatron.verify.pool import VerifierPool


def grade_step(pool: VerifierPool, message_log_batch, metadata) -> EnvironmentReturn:
    rewards, observations = grade_messages(pool, message_log_batch, metadata)
    return EnvironmentReturn(
        observations=observations,
        metadata=metadata,
        next_stop_strings=[None] * len(observations),
        rewards=rewards,
        terminateds=torch.ones_like(rewards),
        answers=None,
    )


def post_process_metrics(batch) -> dict[str, float]:
    rewards = batch["rewards"] * batch["is_end"]
    metrics = {
        "accuracy": float(rewards.float().mean()),
        "fraction_of_samples_properly_ended": float(batch["is_end"].float().mean()),
    }
    if "message_log" in batch:
        metrics.update(status_metrics(batch["message_log"]))
    return metrics


@ray.remote(max_restarts=-1, max_task_retries=-1)  # pragma: no cover
class ClipoMathEnvironment(EnvironmentInterface):
    def __init__(self, cfg: dict[str, Any]):
        s = EnvSettings.from_cfg(cfg)
        self.pool = VerifierPool(
            s.num_workers, timeout=s.timeout, max_chars=s.max_answer_chars, grader=s.grader
        )

    def shutdown(self) -> None:
        self.pool.close()

    def step(self, message_log_batch, metadata) -> EnvironmentReturn:
        return grade_step(self.pool, message_log_batch, metadata)

    def global_post_process_and_metrics(self, batch):
        return batch, post_process_metrics(batch)
