# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One step's rollouts: rank 0 samples and verifies, every rank trains on rank 0's.

The prompts of step k are the next `prompts_per_step` distinct problems (wrapping), and the
sampling seed is derived from the run seed and k, so a resumed run samples what the
uninterrupted one would have.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import torch

from clipo_megatron.runner import parallel
from clipo_megatron.runner.problems import step_problems


def sample_rollouts(gen, problems: list, rollout_cfg, seed: int, step: int, t: dict):
    """(prompts, rollouts, verifiable rewards [B]) on every rank; `gen` is None off rank 0.

    Rewards are math-verify's 0 / 1 per rollout, in the rollouts' row order; `t` gets the
    `generate` and `verify` wall times."""
    from clipo_megatron.verify.boxed import verify_batch

    batch = step_problems(problems, step, rollout_cfg.prompts_per_step)  # no prompt twice
    t0 = time.perf_counter()
    ro: Any = None
    rewards: torch.Tensor | None = None
    if gen is not None:
        ro = gen.generate(
            [b.messages for b in batch],
            rollout_cfg.n,
            temperature=rollout_cfg.temperature,
            top_p=rollout_cfg.top_p,
            max_tokens=rollout_cfg.max_tokens,
            seed=seed * 1_000_003 + step,
        )
    t["generate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if gen is not None:
        rewards = torch.tensor(
            verify_batch(ro.texts, [batch[i].ground_truth for i in ro.prompt_index])
        )
    ro, rewards = parallel.broadcast_from_rank0((ro, rewards))  # all ranks train on rank 0's
    t["verify"] = time.perf_counter() - t0
    return batch, ro, rewards


def token_hash(response_ids: list[list[int]]) -> str:
    """The step's sampled tokens as 16 hex digits (sha256 over the rows in order): two runs
    sampled the same tokens at a step iff their hashes agree (compare's divergence step)."""
    h = hashlib.sha256()
    for row in response_ids:
        h.update(len(row).to_bytes(4, "little"))
        h.update(b"".join(int(t).to_bytes(8, "little", signed=True) for t in row))
    return h.hexdigest()[:16]
