# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What `test_moe_layouts` holds beyond `test_layouts.check_layout`: the router's and experts'
weights after the step, CLIPO's head on every rank, NeMo-RL's logged MoE metrics; and the
reference's ranks merged into one result (every row's numbers) for `check_layout`."""

from __future__ import annotations

import torch


def merged(ref: dict) -> dict:
    """The reference's DP ranks as one result (every row's numbers once: TP rank 0 of each DP
    rank, whose TP replicas `check_layout` holds bit-equal), for `check_layout`."""
    ranks = [r for _, r in sorted(ref.items()) if r["tp"] == 0 and r["cp"] == 0]
    first = dict(ranks[0])
    for key in ("logprobs", "logprobs_after", "lengths", "pooled", "r_cl"):
        first[key] = _pad_cat([r[key] for r in ranks])
    for rows in ("rows", "pooled_rows", "r_cl_rows"):
        first[rows] = torch.cat([r[rows] for r in ranks])
    return first


def _pad_cat(parts: list[torch.Tensor]) -> torch.Tensor:
    if parts[0].dim() == 1:
        return torch.cat(parts)
    width = max(p.shape[1] for p in parts)
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts])


def experts_of(out: dict) -> dict[str, torch.Tensor]:
    """Every router / expert weight of a run by global name (each on some rank; replicas
    bit-equal)."""
    got: dict[str, torch.Tensor] = {}
    for rank, res in sorted(out.items()):
        for k, v in res["experts"].items():
            if k in got:
                assert torch.equal(got[k], v), (rank, k)  # an EP / TP / DP replica
            got[k] = v
    return got


def check_experts(out: dict, ref: dict, bound: float, *, shared: bool) -> float:
    """Every router / expert weight after the step against the reference's; `shared`: the
    shared expert's weights are among them (and only then)."""
    got, want = experts_of(out), experts_of(ref)
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    assert any(".expert" in k for k in want) and any("router" in k for k in want)
    assert any(".shared." in k for k in want) == shared, sorted(want)
    err = max(float((got[k] - want[k]).abs().max()) for k in want)
    assert err <= bound, f"router / expert weights after the step: {err} > {bound}"
    return err


def check_head(out: dict, ref: dict, bound: float) -> float:
    """CLIPO's head after its step on every rank against the reference's (one replicated head:
    a head drawn per rank differs on the ranks that hold few rows, which r_CL may not show)."""
    err = 0.0
    for res in out.values():
        for k, v in ref["head"].items():
            err = max(err, float((res["head"][k].float() - v.float()).abs().max()))
    assert err <= bound, f"CLIPO head after its step: {err} > {bound}"
    return err


def moe_metrics(out: dict) -> dict[str, float]:
    """NeMo-RL's logged MoE metrics (rank 0's: every rank logs the reduced values)."""
    metrics = out[0]["moe_metrics"]
    assert metrics, "no MoE metrics: the router's aux loss is not on"
    assert any("load_balancing_loss" in k for k in metrics), metrics
    return {k: float(v) for k, v in metrics.items()}


def check_moe_metrics(got: dict[str, float], want: dict[str, float], rel: float) -> float:
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    err = max(abs(got[k] - want[k]) / max(abs(want[k]), 1e-30) for k in want)
    assert err <= rel, f"MoE metrics {got} against {want}: relative {err} > {rel}"
    return err


def check_all(
    out: dict, ref: dict, layout, tol: dict, *, shared: bool, weights: float, head: float
) -> dict:
    """`check_layout` on every rank and row, then the router / expert weights (bound `weights`),
    the head (bound `head`) and the logged MoE metrics (relative tol["rel"])."""
    from tests.nemo_rl.real_worker.test_layouts import check_layout

    errs = check_layout(out, merged(ref), layout, tol)
    errs["experts"] = check_experts(out, ref, weights, shared=shared)
    errs["head"] = check_head(out, ref[0], head)
    errs["moe_metrics"] = check_moe_metrics(moe_metrics(out), moe_metrics(ref), tol["rel"])
    return errs
