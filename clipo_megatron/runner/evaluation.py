# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Held-out pass@1 of a run's current policy, through its generator: the in-distribution
set and, reported separately, the perturbed set (`data/perturbed.py`)."""

from __future__ import annotations

import time

import torch

# A perturbed answer is up to ~8 tokens longer (a third term, two-digit numbers): it gets this
# many more new tokens than eval.max_tokens, so its score measures robustness, not truncation.
PERTURBED_EXTRA_TOKENS = 16
PERTURBED_SEED_OFFSET = 20_000  # its generator seed: data.seed + this


def _pass_matrix(run, probs, max_tokens: int, seed: int) -> tuple[torch.Tensor, float]:
    """[P, n] correctness of n samples per problem at the eval temperature, and the seconds
    taken. Generated in chunks of at most EVAL_CHUNK_SEQUENCES sequences (one call for a small
    set, with `seed` as before): one call for all of them held every sequence's KV cache at
    once (eval.size=100000: 17.4 GB, then the OOM killer)."""
    from clipo_megatron.generation.sampling import Sampling
    from clipo_megatron.runner.memory import EVAL_CHUNK_SEQUENCES
    from clipo_megatron.verify.boxed import verify_batch

    e = run.cfg.eval
    t0 = time.perf_counter()
    per_call = max(1, EVAL_CHUNK_SEQUENCES // e.n)  # problems per generate call
    rows = []
    for k, start in enumerate(range(0, len(probs), per_call)):
        chunk = probs[start : start + per_call]
        ro = run.gen.generate(
            [p.messages for p in chunk],
            e.n,
            sampling=Sampling(temperature=e.temperature, top_p=e.top_p),
            max_tokens=max_tokens,
            seed=seed + 1_000_003 * k,
        )
        verdicts = verify_batch(
            ro.texts, [chunk[i].ground_truth for i in ro.prompt_index], grader=run.cfg.clipo.grader
        )
        rows.append(torch.tensor(verdicts, dtype=torch.float64).view(len(chunk), e.n))  # [p, n]
    return torch.cat(rows), time.perf_counter() - t0  # [P, n]


def evaluate(run, seed_offset: int = 10_000) -> dict:
    """pass@1 over n samples per problem on the held-out set (another generator seed) and on
    the perturbed set: keys `pass@1` and `pass@1_perturbed` (absent when its size is 0)."""
    from clipo_megatron.data.perturbed import PERTURBATIONS, perturbation_of, perturbed_arithmetic
    from clipo_megatron.runner.problems import load_problems

    cfg, e = run.cfg, run.cfg.eval
    res: dict = {"n": e.n}
    if e.size > 0:
        probs = load_problems(cfg.data, e.size, seed_offset=seed_offset, path=e.path)
        ok, dt = _pass_matrix(run, probs, e.max_tokens, cfg.seed + 7)
        res.update(
            {
                "pass@1": float(ok.mean()),
                "problems": len(probs),
                "seconds": dt,
                "samples_per_s": len(probs) * e.n / dt,
            }
        )
    size = cfg.perturbed_eval_size()
    if size > 0:
        seed = cfg.data.seed + PERTURBED_SEED_OFFSET
        probs = perturbed_arithmetic(size, seed, one_shot=cfg.data.one_shot)
        max_tokens = e.max_tokens + PERTURBED_EXTRA_TOKENS
        ok, dt = _pass_matrix(run, probs, max_tokens, cfg.seed + 8)
        kinds = [perturbation_of(p) for p in probs]
        res.update(
            {
                "pass@1_perturbed": float(ok.mean()),
                "perturbed_problems": len(probs),
                "perturbed_max_tokens": max_tokens,
                "perturbed_seconds": dt,
                "pass@1_perturbed_by_kind": {
                    k: float(ok[[i for i, x in enumerate(kinds) if x == k]].mean())
                    for k in PERTURBATIONS
                    if k in kinds
                },
            }
        )
    return res
