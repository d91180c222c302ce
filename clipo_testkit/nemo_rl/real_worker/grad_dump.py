# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What Megatron-Core's grad norm is made of, per parameter, read inside NeMo-RL's worker at the
step: each parameter's sum of squared `main_grad` (after `finalize_model_grads`, before the clip),
its TP attributes, and whether the optimizer's `get_grads_for_grad_norm` counted it on this rank;
after the step, each parameter's value. A test joins the ranks' records (`joined`) to hold every
parameter's gradient and updated value against TP 1's, and to say which parameters make up a grad
norm that differs."""

from __future__ import annotations

from typing import Any

import torch

ATTRS = ("tensor_model_parallel", "partition_dim", "sequence_parallel", "allreduce")


def _named(worker) -> list[tuple[str, torch.nn.Parameter]]:
    from megatron.core.utils import unwrap_model

    chunks = list(worker.model) if isinstance(worker.model, list) else [worker.model]
    return [(n, p) for c in unwrap_model(chunks) for n, p in c.named_parameters()]


def _chained(opt) -> list:
    return list(getattr(opt, "chained_optimizers", None) or [opt])


def record_step(worker) -> dict[str, Any]:
    """Wraps the optimizer's grad norm (once, this step) to record what it is made of; returns
    the record, filled by `train`'s `optimizer.step()`."""
    rec: dict[str, Any] = {}
    opt = worker.optimizer
    # ChainedOptimizer.step calls get_grad_norm; a single MegatronOptimizer's clip_grad_norm
    name = "get_grad_norm" if hasattr(opt, "chained_optimizers") else "clip_grad_norm"
    original = getattr(opt, name)

    def wrapped(*args, **kwargs):
        if not rec:
            rec.update(_grads(worker))
        out = original(*args, **kwargs)
        rec.setdefault("norm", float(out) if out is not None else None)
        return out

    setattr(opt, name, wrapped)
    return rec


def _hyper(cls, group: dict) -> dict[str, Any]:
    """A torch optimizer's param-group settings its constructor takes (lr as set for this step)."""
    import inspect

    takes = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in group.items() if k != "params" and k in takes}


def _grads(worker) -> dict[str, Any]:
    counted: dict[int, int] = {}  # data_ptr of a grad in the norm -> which optimizer counted it
    groups, steps = [], {}  # steps: id(param) -> (torch optimizer class, settings, clip_grad)
    for i, sub in enumerate(_chained(worker.optimizer)):
        for g in sub.get_grads_for_grad_norm():
            counted[g.data_ptr()] = i
        group = sub.get_grad_stats_parallel_group()
        groups.append(torch.distributed.get_world_size(group) if group is not None else 1)
        inner = getattr(sub, "optimizer", None)
        for pg in getattr(inner, "param_groups", []):
            for p in pg["params"]:
                steps[id(p)] = (type(inner), _hyper(type(inner), pg), sub.config.clip_grad)
    params = {}
    for n, p in _named(worker):
        g = getattr(p, "main_grad", None)
        if g is None:
            g = p.grad
        params[n] = {
            "sq": float(g.double().pow(2).sum()) if g is not None else 0.0,
            "grad": g.detach().cpu().float().clone() if g is not None else None,
            "before": p.detach().cpu().float().clone(),
            "step": steps.get(id(p)),
            "shape": tuple(p.shape),
            "counted": counted.get(g.data_ptr()) if g is not None else None,
            **{a: getattr(p, a, None) for a in ATTRS},
        }
    return {"params": params, "groups": groups}


def values(worker) -> dict[str, torch.Tensor]:
    """Every parameter's value (after the step), by name."""
    return {n: p.detach().cpu().float().clone() for n, p in _named(worker)}


def replay(info: dict, grad: torch.Tensor, before: torch.Tensor, norm: float) -> torch.Tensor:
    """The first optimizer step on one parameter, replayed on CPU: Megatron-Core's clip
    (`clip_grad_by_total_norm_fp32`: grads times clip / (norm + 1e-6) when that is below 1), then
    the worker's own torch optimizer class with the parameter's group settings, fresh state."""
    cls, hyper, clip = info["step"]
    coeff = clip / (norm + 1.0e-6) if clip > 0 else 1.0
    p = torch.nn.Parameter(before.clone())
    p.grad = grad.clone() * coeff if coeff < 1.0 else grad.clone()
    cls([p], **hyper).step()
    return p.detach()


def _full(parts: list[torch.Tensor], info: dict) -> torch.Tensor:
    """A TP-split parameter's shards (TP order) as one tensor; a replicated one as rank 0's."""
    if info["tensor_model_parallel"] and len(parts) > 1:
        return torch.cat(parts, dim=int(info["partition_dim"]))
    return parts[0]


def joined(out: dict, key: str) -> dict[str, tuple[dict, torch.Tensor]]:
    """{name: (rank 0's record, the full tensor)} of `res["grads"]["params"][n][key]` ("grad",
    "before") or `res["values"][n]` (key "value") over the TP ranks of DP / PP / CP rank 0."""
    ranks = [r for _, r in sorted(out.items()) if r["dp"] == 0 and r["cp"] == 0 and r["pp"] == 0]
    ranks.sort(key=lambda r: r["tp"])
    got = {}
    for n, info in ranks[0]["grads"]["params"].items():
        parts = [r["values"][n] if key == "value" else r["grads"]["params"][n][key] for r in ranks]
        if parts[0] is not None:
            got[n] = (info, _full(parts, info))
    return got


def _common(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The overlap of two tensors (a vocab padded differently per TP size keeps its real rows)."""
    if a.shape == b.shape:
        return a, b
    idx = tuple(slice(0, min(x, y)) for x, y in zip(a.shape, b.shape))
    return a[idx], b[idx]


def compare(out: dict, ref: dict, key: str) -> dict[str, tuple[float, float]]:
    """{name: (largest abs difference, largest abs value of the reference)} per parameter."""
    got, want = joined(out, key), joined(ref, key)
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    res = {}
    for n in want:
        a, b = _common(got[n][1], want[n][1])
        res[n] = (float((a - b).abs().max()), float(b.abs().max()))
    return res


def norm_shares(out: dict) -> dict[str, float]:
    """Each parameter's squared-grad sum as the reported norm counts it: summed over the ranks
    that counted it, each optimizer's sum divided by its number of grad-stats groups (a rank's
    norm sums its own group; the groups are replicas), so sum(shares) = norm**2."""
    shares: dict[str, float] = {}
    world = len(out)
    for res in out.values():
        groups = res["grads"]["groups"]
        for n, info in res["grads"]["params"].items():
            i = info["counted"]
            if i is not None:
                shares[n] = shares.get(n, 0.0) + info["sq"] * groups[i] / world
    return shares


def double_reduced(info: dict) -> bool:
    """Reduced twice (tested at TP 2 + SP, expert TP 1, EP 1): an expert parameter
    (`allreduce=False`: DDP sums it over the expert-DP group, which here spans the TP ranks) that
    also carries `sequence_parallel=True` (`finalize_model_grads` sums it over TP again)."""
    return info["allreduce"] is False and bool(info["sequence_parallel"])


def accounting(out: dict, ref: dict, rel: float, weight: float) -> dict[str, Any]:
    """`out` (a TP + SP run) against `ref` (TP 1), one `train` step, per parameter: the reported
    norm is the parameters' shares; every gradient equals TP 1's (relative `rel` of its largest)
    except the double-reduced ones, at twice; the norm without the double count equals TP 1's;
    the step replayed (`replay`) gives each run's weights (1e-7), and TP 2's gradients, the
    double count halved, clipped by TP 1's norm give TP 1's weights up to what the gradients'
    rounding moves (Adam's lr / eps times it) plus `weight`."""
    norms = {k: r[0]["train"]["grad_norm"] for k, r in (("out", out), ("ref", ref))}
    for key, run in (("out", out), ("ref", ref)):
        total = sum(norm_shares(run).values()) ** 0.5
        assert abs(total - norms[key]) <= rel * norms[key], (key, total, norms[key])
    got, want = joined(out, "grad"), joined(ref, "grad")
    doubled = sorted(n for n, (info, _) in got.items() if double_reduced(info))
    grad_err = 0.0
    for n, (_, g) in got.items():
        a, b = _common(g, want[n][1])
        a = a / 2 if n in doubled else a
        grad_err = max(grad_err, float((a - b).abs().max()) / max(float(b.abs().max()), 1e-30))
    assert grad_err <= rel, f"a gradient off TP 1's beyond the double count: {grad_err}"
    shares = norm_shares(out)
    fixed = sum(v / 4 if n in doubled else v for n, v in shares.items()) ** 0.5
    assert abs(fixed - norms["ref"]) <= rel * norms["ref"], (fixed, norms["ref"])
    replayed = 0.0
    for run, norm in ((out, norms["out"]), (ref, norms["ref"])):
        values, grads, before = joined(run, "value"), joined(run, "grad"), joined(run, "before")
        for n, (info, g) in grads.items():
            step = replay(info, g, before[n][1], norm)
            replayed = max(replayed, float((step - values[n][1]).abs().max()))
    assert replayed <= 1e-7, f"the replayed step is not the worker's: {replayed}"
    vals, ref_vals, before = joined(out, "value"), joined(ref, "value"), joined(out, "before")
    step_err = fixed_err = noise = 0.0
    for n, (info, g) in got.items():
        a, b = _common(vals[n][1], ref_vals[n][1])
        step_err = max(step_err, float((a - b).abs().max()))
        g = g / 2 if n in doubled else g
        a, b = _common(replay(info, g, before[n][1], norms["ref"]), ref_vals[n][1])
        ga, gb = _common(g, want[n][1])
        # Adam's first step moves an element by lr * x / (|x| + eps), x its clipped gradient:
        # Lipschitz lr / eps in x, so TP's gradient rounding may move it by up to that much
        _, hyper, clip = info["step"]
        lip = hyper["lr"] / hyper["eps"] * min(1.0, clip / (norms["ref"] + 1.0e-6))
        fixed_err = max(fixed_err, float((a - b).abs().max()))
        noise = max(noise, float(((a - b).abs() - lip * (ga - gb).abs()).max()))
    assert noise <= weight, f"TP 2's step with TP 1's norm beyond the gradients' rounding: {noise}"
    return {
        "doubled": doubled,
        "norm": norms["out"],
        "norm_tp1": norms["ref"],
        "norm_without_double_count": fixed,
        "doubled_share": sum(shares[n] for n in doubled) / norms["out"] ** 2,
        "grad_err": grad_err,
        "replayed": replayed,
        "weights_err": step_err,
        "weights_err_with_tp1_norm": fixed_err,
        "beyond_rounding": noise,
    }
