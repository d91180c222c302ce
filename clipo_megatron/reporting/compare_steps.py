# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What the two arms' step logs (metrics.jsonl) say seed by seed: the step at which their sampled
tokens part, the steps no group could learn from in either arm, and the CLIPO arm's mean
diagnostics.

Apart from `reporting/compare_report.py` (which averages the runs' results.json over seeds and
writes the tables) because these read one seed's pair of per-step histories, not final numbers.
"""

from __future__ import annotations

# What CLIPO did to the update (core/diagnostics.py), the CLIPO arm's mean over its steps.
DIAGNOSTICS = {
    "clipo/valid_group_frac": ("valid groups (>= 2 correct, >= 1 incorrect)", 2),
    "clipo/r_cl_spread": ("r_CL spread among a valid group's correct rollouts", 4),
    "clipo/adv_share": (
        "CLIPO's share of the advantage, mean \\|A(r') - A(r)\\| / mean \\|A(r)\\|",
        3,
    ),
    "clipo/ranked_frac": ("valid groups whose correct rollouts CLIPO ranks", 2),
}


def run_diagnostics(history: list[dict]) -> dict[str, float]:
    """The mean over a CLIPO run's steps of each `DIAGNOSTICS` key it logged (every step logs
    them while the head runs; a run older than the diagnostics has none)."""
    out = {}
    for key in DIAGNOSTICS:
        vals = [h[key] for h in history if key in h]
        if vals:
            out[key] = sum(vals) / len(vals)
    return out


def divergence_step(clipo: list[dict], baseline: list[dict]) -> dict:
    """The first step at which the two arms sampled different tokens (`rollout/token_hash`):
    {"step": k or None (never), "steps": steps compared}; before it CLIPO had changed nothing
    the policy samples. Steps without a hash (runs older than the hash) are not compared."""
    hashes = [
        {h["step"]: h["rollout/token_hash"] for h in x if "rollout/token_hash" in h}
        for x in (clipo, baseline)
    ]
    common = sorted(set(hashes[0]) & set(hashes[1]))
    first = next((k for k in common if hashes[0][k] != hashes[1][k]), None)
    return {"step": first, "steps": len(common)}


def shared_degenerate_steps(clipo: list[dict], baseline: list[dict]) -> list[int]:
    """Steps whose rollouts were all wrong (or all right) in both arms (`plots.degenerate_steps`):
    no group had a learning signal in either; the task's draw, not an arm, made them."""
    from clipo_megatron.reporting.plots import degenerate_steps, rewards_by_step

    return sorted(
        set(degenerate_steps(rewards_by_step(clipo)))
        & set(degenerate_steps(rewards_by_step(baseline)))
    )
