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


def sample_rollouts(
    gen, problems: list, rollout_cfg, seed: int, step: int, t: dict, *, grader: str = "math_verify"
):
    """(prompts, rollouts, verifiable rewards [B], verifier status counts) on every rank; `gen`
    is None off rank 0.

    Rewards are the grader's (`clipo.grader`: math_verify or paper) 0 / 1 per rollout, in the rollouts' row order, each answer under
    the verifier's per-answer deadline (rollout.verify_timeout, rollout.max_answer_chars); the
    counts are answers per status (`verify.graders.STATUSES`: a timed-out answer scores 0 and is
    counted, not hidden); `t` gets the `generate` and `verify` wall times."""
    from clipo_megatron.generation.sampling import Sampling
    from clipo_megatron.verify import boxed
    from clipo_megatron.verify.graders import status_counts
    from clipo_megatron.verify.pool import shared_pool

    batch = step_problems(problems, step, rollout_cfg.prompts_per_step)  # no prompt twice
    t0 = time.perf_counter()
    ro: Any = None
    rewards: torch.Tensor | None = None
    counts: dict[str, int] | None = None
    if gen is not None:
        ro = gen.generate(
            [b.messages for b in batch],
            rollout_cfg.n,
            sampling=Sampling(temperature=rollout_cfg.temperature, top_p=rollout_cfg.top_p),
            max_tokens=rollout_cfg.max_tokens,
            seed=seed * 1_000_003 + step,
        )
    t["generate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if gen is not None:
        shared_pool(timeout=rollout_cfg.verify_timeout, max_chars=rollout_cfg.max_answer_chars)
        scores = boxed.verify_batch(
            ro.texts, [batch[i].ground_truth for i in ro.prompt_index], grader=grader
        )
        rewards = torch.tensor(scores)
        # A stand-in grader (tests) returns plain floats: every answer graded.
        counts = status_counts(getattr(scores, "statuses", ["ok"] * len(scores)))
    # all ranks train on rank 0's rollouts and log its counts
    ro, rewards, counts = parallel.broadcast_from_rank0((ro, rewards, counts))
    t["verify"] = time.perf_counter() - t0
    return batch, ro, rewards, counts


def token_hash(response_ids: list[list[int]]) -> str:
    """The step's sampled tokens as 16 hex digits (sha256 over the rows in order): two runs
    sampled the same tokens at a step iff their hashes agree (compare's divergence step)."""
    h = hashlib.sha256()
    for row in response_ids:
        h.update(len(row).to_bytes(4, "little"))
        h.update(b"".join(int(t).to_bytes(8, "little", signed=True) for t in row))
    return h.hexdigest()[:16]
