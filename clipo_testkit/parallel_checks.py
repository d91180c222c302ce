# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO's parallel pieces on the device, against one host process: one set of checks, two places.

On a GPU node `scripts/check_gpu.sh` runs them under torchrun over NCCL on real
GPUs (`clipo_testkit.gpu_tier1`); on a CPU machine tests/megatron/test_device_rules.py
runs them over gloo inside `emulated_cuda()`, where a host tensor in a device
op or in an NCCL collective raises as it would on a GPU. Each check, on every rank
of a world of any size:

    gather    DP all-gather of ragged shards (packing makes them ragged), with grad
    pool_sp   MicrobatchPooler, padded rows, sequence parallel over the world
    pool_cp   MicrobatchPooler, packed THD (`cu_seqlens_padded`) under context parallel
    pool_tp   MicrobatchPooler, TP replicas with SP off: every rank must agree bit for bit
    head_tp   TP-sharded head built from a policy config with sequence parallelism and
              gradient-accumulation fusion on, stepped by `clipo_step`
    step_dp   `clipo_step` over ragged DP shards (labels and ids from the host)

`run_checks(rank, world)` returns host numpy arrays; `reference(world)` computes
the same quantities in one process on the host; `compare` lists the mismatches.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

B, S, D, EMBED = 16, 24, 32, 8  # rows (4 groups of 4), padded length, hidden, embedding


def _cfg():
    from clipo_megatron.core import CLIPOConfig

    return CLIPOConfig(embed_dim=EMBED, temperature=0.1)


def data():
    """Hidden states [S, B, D], response mask [B, S], lengths [B], labels, group / sample ids."""
    gen = torch.Generator().manual_seed(11)
    hidden = torch.randn(S, B, D, generator=gen)
    lengths = torch.randint(10, S + 1, (B,), generator=gen)
    mask = torch.zeros(B, S, dtype=torch.bool)
    for i in range(B):
        start = 3 + int(torch.randint(0, 4, (1,), generator=gen))
        mask[i, start : int(lengths[i])] = True
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0])
    gids = torch.arange(4).repeat_interleave(4) * 10 + 3
    sids = torch.arange(B) + 100
    w = torch.randn(EMBED, D, generator=gen) * 0.2  # the head's projection, replicated
    return SimpleNamespace(
        hidden=hidden, mask=mask, lengths=lengths, correct=correct, gids=gids, sids=sids, w=w
    )


def dp_rows(rank: int, world: int) -> torch.Tensor:
    """Ragged, interleaved DP shards: rank r holds rows r, r + world, ... plus one extra on rank 0."""
    rows = torch.arange(rank, B, world)
    if world > 1 and rank == 0:
        rows = rows[:-1]
    if world > 1 and rank == world - 1:
        rows = torch.cat([rows, torch.tensor([B - world])])
    return torch.sort(rows).values


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _model_config(tp: int):
    from clipo_megatron.models.arch import GPTArch
    from clipo_megatron.runner.model.model_builder import transformer_config

    arch = GPTArch(
        vocab_size=64, hidden_size=D, num_layers=1, num_attention_heads=4, num_query_groups=4,
        ffn_hidden_size=2 * D,
    )  # fmt: skip
    # The policy's config as NeMo-RL's recipes set it: TP with sequence parallelism and
    # gradient-accumulation fusion on (what the head must not inherit).
    return transformer_config(
        arch, tensor_parallel=tp, sequence_parallel=tp > 1, gradient_accumulation_fusion=True
    )


def _pooler_pool(pooler, meta: dict, hidden_local, cu=None):
    mb = SimpleNamespace(data_dict=meta, cu_seqlens_padded=cu)
    for _ in pooler.tee([mb]):
        pooler.pool(hidden_local)
    return pooler.result()


CHECKS = ("gather", "pool_sp", "pool_cp", "pool_tp", "head_tp", "step_dp")


def run_checks(rank: int, world: int, device) -> dict[str, dict[str, np.ndarray]]:
    """Every check on this rank, each on its own (a failing one reports its error and the
    others still run); tensors are made on `device` ("cuda": real or emulated)."""
    import traceback

    import torch.distributed as dist

    x = data()
    ctx = SimpleNamespace(rank=rank, world=world, device=device, group=dist.group.WORLD, x=x)
    out: dict[str, dict] = {}
    for name in CHECKS:
        try:
            out[name] = globals()[f"_check_{name}"](ctx)
        except Exception:  # reported per check; the parent names it
            out[name] = {"error": traceback.format_exc(limit=6)}
    return out


def _meta(ctx) -> dict:
    """A microbatch's metadata, moved to the device as NeMo-RL's worker moves the whole dict."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import SAMPLE_IDX_KEY

    return {
        SAMPLE_IDX_KEY: torch.arange(B).to(ctx.device),
        "token_mask": ctx.x.mask.to(ctx.device),
        "input_lengths": ctx.x.lengths.to(ctx.device),
    }


def _check_gather(ctx) -> dict:
    """Ragged DP shards with grad; backward keeps this rank's rows."""
    from clipo_megatron.megatron.gather import gather_rows

    rows = dp_rows(ctx.rank, ctx.world)
    part = (ctx.x.hidden[0, rows] * 1.0).to(ctx.device).requires_grad_(True)  # [b, D]
    full, _ = gather_rows(part, dp_group=ctx.group)
    weights = torch.arange(B, dtype=torch.float32, device=ctx.device).unsqueeze(1)
    (full * weights).sum().backward()
    return {"rows": _np(full), "grad": _np(part.grad)}


def _check_pool_sp(ctx) -> dict:
    """Padded sbd rows, sequence parallel: S split across the world."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import MicrobatchPooler

    s_pad = -(-S // ctx.world) * ctx.world
    hid = torch.nn.functional.pad(ctx.x.hidden, (0, 0, 0, 0, 0, s_pad - S))
    local = hid.chunk(ctx.world, dim=0)[ctx.rank].to(ctx.device)
    pooler = MicrobatchPooler(tp_group=ctx.group, sequence_parallel=True)
    r, pooled = _pooler_pool(pooler, _meta(ctx), local)
    return {"rows": _np(r), "pooled": _np(pooled)}


def _check_pool_cp(ctx) -> dict:
    """Packed THD (`cu_seqlens_padded`, sequences padded to 2 * cp), load-balanced CP chunks."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import MicrobatchPooler
    from clipo_megatron.megatron.pooling.sharded import cp_chunk_positions

    x, mult = ctx.x, 2 * ctx.world
    padded = (x.lengths + mult - 1) // mult * mult
    cu = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(padded, 0)])
    stream = torch.zeros(int(cu[-1]), D)
    for i in range(B):
        stream[int(cu[i]) : int(cu[i]) + int(x.lengths[i])] = x.hidden[: int(x.lengths[i]), i]
    local = torch.cat(
        [cp_chunk_positions(int(padded[i]), ctx.world, ctx.rank) + int(cu[i]) for i in range(B)]
    )
    pooler = MicrobatchPooler(cp_group=ctx.group)
    hidden = stream[local].unsqueeze(1).to(ctx.device)  # [T / cp, 1, D]
    r, pooled = _pooler_pool(pooler, _meta(ctx), hidden, cu.to(torch.int32).to(ctx.device))
    return {"rows": _np(r), "pooled": _np(pooled)}


def _check_pool_tp(ctx) -> dict:
    """SP off: every TP rank pools the whole sequence; the replicas must agree bit for bit."""
    from clipo_megatron.megatron.pooling.microbatch_pooler import MicrobatchPooler

    pooler = MicrobatchPooler(tp_group=ctx.group, sequence_parallel=False)
    r, pooled = _pooler_pool(pooler, _meta(ctx), ctx.x.hidden.to(ctx.device))
    return {"rows": _np(r), "pooled": _np(pooled)}


def _pooled_reference(ctx) -> torch.Tensor:
    from clipo_megatron.megatron.pooling.masked_mean import masked_mean

    return masked_mean(ctx.x.hidden, ctx.x.mask, layout="sbd")  # [B, D] on the host


def _check_head_tp(ctx) -> dict:
    """The TP-sharded head built from the policy's config (SP and grad-accumulation fusion on),
    stepped by `clipo_step`. Every shard holds the same rows of W, so the cosine equals the
    replicated head's."""
    from clipo_megatron.megatron.clipo_step import clipo_step
    from clipo_megatron.megatron.head import build_contrastive_head
    from clipo_megatron.megatron.head_trainer import HeadTrainer

    x, world = ctx.x, ctx.world
    head = build_contrastive_head(
        _model_config(world), input_size=D, embed_dim=EMBED * world, tensor_parallel=True,
        tp_group=ctx.group,
    )  # fmt: skip
    with torch.no_grad():
        head.proj.weight.copy_(x.w)
    trainer = HeadTrainer(head.to(ctx.device), _cfg())
    pooled = _pooled_reference(ctx).to(ctx.device)
    res = clipo_step(trainer, pooled, x.correct, x.gids, x.sids, step=0)
    return {"emb_shard": _np(res.embeddings), "rewards": _np(res.rewards)}


def _check_step_dp(ctx) -> dict:
    """`clipo_step` over ragged DP shards; labels and ids arrive from the host."""
    from clipo_megatron.megatron.clipo_step import clipo_step
    from clipo_megatron.megatron.head_trainer import HeadTrainer

    x, rows = ctx.x, dp_rows(ctx.rank, ctx.world)
    lin = torch.nn.Linear(D, EMBED, bias=False)
    with torch.no_grad():
        lin.weight.copy_(x.w)
    trainer = HeadTrainer(lin.to(ctx.device), _cfg(), dp_group=ctx.group)
    pooled = _pooled_reference(ctx)[rows].to(ctx.device)
    res = clipo_step(trainer, pooled, x.correct[rows], x.gids[rows], x.sids[rows], step=0)
    return {
        "rows": _np(rows),
        "rewards": _np(res.rewards),
        "weight_after": _np(lin.weight),
        "loss": np.array([res.metrics["clipo/loss"]]),
    }


def reference(world: int) -> dict[str, dict[str, np.ndarray]]:
    """What every check must give, computed in one process on the host (world only shapes it)."""
    from clipo_megatron.megatron.head_trainer import HeadTrainer
    from clipo_megatron.megatron.pooling.masked_mean import masked_mean

    x = data()
    pooled = masked_mean(x.hidden, x.mask, layout="sbd")  # [B, D]
    shards = [dp_rows(r, world) for r in range(world)]
    order = torch.cat(shards)  # the gather concatenates in rank order
    ref: dict[str, dict[str, np.ndarray]] = {"gather": {"rows": _np(x.hidden[0, order])}}
    # Every rank's loss weighs gathered row k by k; backward sums the ranks' gradients.
    weights = float(world) * torch.arange(B, dtype=torch.float32).unsqueeze(1)
    starts = [sum(len(sh) for sh in shards[:r]) for r in range(world)]
    ref["pool"] = {"rows": np.arange(B), "pooled": _np(pooled)}
    lin = torch.nn.Linear(D, EMBED, bias=False)
    with torch.no_grad():
        lin.weight.copy_(x.w)
    res = HeadTrainer(lin, _cfg()).step(pooled, x.correct, x.gids, x.sids, step=0)
    ref["step"] = {
        "rewards": _np(res.rewards),
        "weight_after": _np(lin.weight),
        "loss": np.array([res.metrics["clipo/loss"]]),
        "emb": _np(torch.nn.functional.normalize(pooled @ x.w.T, dim=-1)),
    }
    ref["gather_grad"] = {
        f"rank{r}": _np(weights[starts[r] : starts[r] + len(shards[r])].expand(-1, D))
        for r in range(world)
    }
    return ref


def compare(results: dict[int, dict], world: int, *, rtol: float = 1e-5, atol: float = 1e-5):
    """{check: max abs difference} for every check, and the list of failures."""
    ref = reference(world)
    diffs: dict[str, float] = {}
    failures: list[str] = []

    def check(name: str, got, want, exact: bool = False):
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        if got.shape != want.shape:
            failures.append(f"{name}: shape {got.shape} != {want.shape}")
            diffs[name] = float("inf")
            return
        d = float(np.abs(got - want).max()) if got.size else 0.0
        diffs[name] = max(diffs.get(name, 0.0), d)
        ok = d == 0.0 if exact else np.allclose(got, want, rtol=rtol, atol=atol)
        if not ok:
            failures.append(f"{name}: max |diff| {d:.3g}{' (must be 0)' if exact else ''}")

    for r, res in sorted(results.items()):
        ok = {k: v for k, v in res.items() if "error" not in v}
        for name in CHECKS:
            if name not in ok:
                diffs[name] = float("inf")
                failures.append(f"{name}: rank {r} raised\n{res[name]['error']}")
        if "gather" in ok:
            check("gather", ok["gather"]["rows"], ref["gather"]["rows"], exact=True)
            check("gather_grad", ok["gather"]["grad"], ref["gather_grad"][f"rank{r}"], exact=True)
        for name in ("pool_sp", "pool_cp", "pool_tp"):
            if name in ok:
                check(name + "_rows", ok[name]["rows"], ref["pool"]["rows"], exact=True)
                check(name, ok[name]["pooled"], ref["pool"]["pooled"])
        if "head_tp" in ok:
            check("head_tp", ok["head_tp"]["rewards"], ref["step"]["rewards"])
        if "step_dp" in ok:
            rows = ok["step_dp"]["rows"]
            check("step_dp", ok["step_dp"]["rewards"], ref["step"]["rewards"][rows])
            check("step_dp_weight", ok["step_dp"]["weight_after"], ref["step"]["weight_after"])
            check("step_dp_loss", ok["step_dp"]["loss"], ref["step"]["loss"])  # whole batch
    pooled = [res["pool_tp"]["pooled"] for res in results.values() if "error" not in res["pool_tp"]]
    for p in pooled[1:]:  # TP replicas with SP off: bit for bit
        check("pool_tp_replicas", p, pooled[0], exact=True)
    return diffs, failures
