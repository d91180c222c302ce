# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The math / multiple-choice environment as a NeMo-RL Ray actor (imported where NeMo-RL is installed).

Registered as env `clipo_math` by `data.register_with_nemo_rl()`. Each step
scores the last assistant message of every rollout against
`metadata["ground_truth"]` with `data.score` (math-verify for math, letter
match for `clipo_kind` "mc": MMLU / TruthfulQA / CommonsenseQA) in a process pool
(math-verify's timeouts are signal based: processes, not threads).
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from typing import Any

import ray
import torch
from nemo_rl.environments.interfaces import EnvironmentInterface, EnvironmentReturn

from clipo_megatron.nemo_rl.data import score_batch


def _last_assistant(log: list[dict[str, Any]]) -> str:
    for m in reversed(log):
        if m.get("role") == "assistant":
            return str(m["content"])
    return ""


@ray.remote(max_restarts=-1, max_task_retries=-1)  # pragma: no cover
class ClipoMathEnvironment(EnvironmentInterface):
    def __init__(self, cfg: dict[str, Any]):
        self.num_workers = int(cfg.get("num_workers", 8))
        self.pool = ProcessPoolExecutor(max_workers=self.num_workers)

    def shutdown(self) -> None:
        self.pool.shutdown(cancel_futures=True)

    def step(self, message_log_batch, metadata) -> EnvironmentReturn:
        responses = [_last_assistant(log) for log in message_log_batch]
        truths = [str(m["ground_truth"]) for m in metadata]
        kinds = [m.get("clipo_kind", "math") for m in metadata]
        n = max(1, min(self.num_workers, len(responses)))
        chunks = [slice(i * len(responses) // n, (i + 1) * len(responses) // n) for i in range(n)]
        futures = [self.pool.submit(score_batch, responses[c], truths[c], kinds[c]) for c in chunks]
        rewards = torch.tensor([r for f in futures for r in f.result()], dtype=torch.float32)
        return EnvironmentReturn(
            observations=[
                {
                    "role": "environment",
                    "content": f"Environment: {'correct' if r else 'incorrect'}",
                }
                for r in rewards.tolist()
            ],
            metadata=metadata,
            next_stop_strings=[None] * len(responses),
            rewards=rewards,
            terminateds=torch.ones_like(rewards),
            answers=None,
        )

    def global_post_process_and_metrics(self, batch):
        rewards = batch["rewards"] * batch["is_end"]
        return batch, {
            "accuracy": float(rewards.float().mean()),
            "fraction_of_samples_properly_ended": float(batch["is_end"].float().mean()),
        }
