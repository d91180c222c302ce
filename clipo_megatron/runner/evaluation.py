# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Held-out pass@1 of a run's current policy, through its generator."""

from __future__ import annotations

import time

import torch


def evaluate(run, seed_offset: int = 10_000) -> dict:
    """pass@1 over n samples at the eval temperature on a held-out generator seed."""
    from clipo_megatron.runner.problems import load_problems
    from clipo_megatron.verify.boxed import verify_batch

    e = run.cfg.eval
    probs = load_problems(run.cfg.data, e.size, seed_offset=seed_offset, path=e.path)
    t0 = time.perf_counter()
    ro = run.gen.generate(
        [p.messages for p in probs],
        e.n,
        temperature=e.temperature,
        top_p=e.top_p,
        max_tokens=e.max_tokens,
        seed=run.cfg.seed + 7,
    )
    ok = torch.tensor(
        verify_batch(ro.texts, [probs[i].ground_truth for i in ro.prompt_index])
    ).view(len(probs), e.n)  # [P, n]
    dt = time.perf_counter() - t0
    return {
        "pass@1": float(ok.mean()),
        "problems": len(probs),
        "n": e.n,
        "seconds": dt,
        "samples_per_s": len(probs) * e.n / dt,
    }
