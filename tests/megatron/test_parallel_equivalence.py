# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""TP=2, PP=2, DP=2 (real tiny GPTModel) and SP/CP/THD pooling vs one process.

One spawned 2-rank gloo job runs every layout in turn (re-initialising
megatron's parallel_state between them) and returns what each rank computed;
the parent computes the single-process reference and compares.
Tolerances (fp32): pooled hidden states, embeddings and rewards 1e-5
absolute / 1e-5 relative (different reduction orders in sharded matmuls);
head gradients 1e-5; synthetic pooling 1e-6.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("megatron.core")

from clipo_megatron.megatron.head import build_contrastive_head  # noqa: E402
from clipo_megatron.megatron.head_trainer import HeadTrainer  # noqa: E402
from clipo_megatron.megatron.pooling.masked_mean import (  # noqa: E402
    masked_sum_and_count,
    mean_from_sums,
)
from clipo_megatron.runner.model.model_builder import build_gpt_model, transformer_config  # noqa: E402

from .common import ARCH, CFG, SEQ, batch, causal_mask, forward_and_pool  # noqa: E402
from .dist_utils import run_distributed  # noqa: E402

pytestmark = [pytest.mark.mcore, pytest.mark.multiprocess]

TOL = dict(rtol=1e-5, atol=1e-5)


def _head(tp: bool, w_full: torch.Tensor, tp_group=None, rank: int = 0, tp_size: int = 1):
    head = build_contrastive_head(
        transformer_config(ARCH),
        input_size=ARCH.hidden_size,
        embed_dim=CFG.embed_dim,
        tensor_parallel=tp,
        tp_group=tp_group,
    )
    shard = w_full.chunk(tp_size, dim=0)[rank] if tp else w_full
    with torch.no_grad():
        head.proj.weight.copy_(shard)
    return head


def _pooled(model, ids, mask):
    pos = torch.arange(SEQ).expand_as(ids)
    with torch.no_grad():
        return forward_and_pool(model, mask, ids, pos, causal_mask(SEQ))[1]


def _reinit(tp: int, pp: int):
    from megatron.core import parallel_state as ps

    from clipo_megatron.megatron.parallel import reset_model_parallel

    reset_model_parallel(tp, pp)
    return ps


def _phase_pooling(rank, world):
    """SP, CP (load-balanced) and packed THD + CP on synthetic shards; record collective sizes."""
    import torch.distributed as dist

    from clipo_megatron.megatron.pooling import sharded as pp_mod

    sizes = []
    real = dist.all_reduce

    def recording(t, *a, **k):
        sizes.append(tuple(t.shape))
        return real(t, *a, **k)

    gen = torch.Generator().manual_seed(5)
    b, s, d = 3, 8, 6
    hidden = torch.randn(s, b, d, generator=gen)  # [S, B, D] full
    mask = torch.zeros(b, s, dtype=torch.bool)
    mask[0, 2:7] = True
    mask[1, 0:8] = True
    mask[2, 5:6] = True
    counts = mask.sum(1).float()
    group = dist.group.WORLD
    out = {}
    dist.all_reduce = recording
    try:
        # Sequence parallel: rank r holds positions [r*S/2, (r+1)*S/2).
        seg = pp_mod.padded_local_segment_ids(mask, sp_size=world, sp_rank=rank)
        local = hidden.chunk(world, dim=0)[rank]
        out["sp"] = pp_mod.sharded_response_mean(
            local, seg, counts, tp_group=group, sequence_parallel=True
        )
        # Context parallel, load-balanced chunks r and 2cp-1-r.
        pos = pp_mod.cp_chunk_positions(s, world, rank)
        seg = pp_mod.padded_local_segment_ids(mask, cp_size=world, cp_rank=rank)
        out["cp"] = pp_mod.sharded_response_mean(hidden[pos], seg, counts, cp_group=group)
        # Packed THD: sequences of padded lengths 8, 4, 8 (divisible by 2*cp) in one stream.
        lens = [8, 4, 8]
        cu = torch.tensor([0, 8, 12, 20])
        stream = torch.cat([hidden[:n, i] for i, n in enumerate(lens)])  # [T, D]
        tmask = torch.cat([mask[i, :n] for i, n in enumerate(lens)])
        seg = pp_mod.packed_local_segment_ids(cu, tmask, cp_size=world, cp_rank=rank)
        local_idx = torch.cat(
            [pp_mod.cp_chunk_positions(n, world, rank) + int(cu[i]) for i, n in enumerate(lens)]
        )
        thd_counts = torch.tensor(
            [float(tmask[int(cu[i]) : int(cu[i + 1])].sum()) for i in range(3)]
        )
        out["thd"] = pp_mod.sharded_response_mean(
            stream[local_idx].unsqueeze(1), seg, thd_counts, cp_group=group
        )
    finally:
        dist.all_reduce = real
    out["collective_shapes"] = sizes
    out["hidden"], out["mask"] = hidden, mask
    return out


def _phase_tp(rank, world, w_full):
    ps = _reinit(tp=world, pp=1)
    torch.manual_seed(0)
    model = build_gpt_model(ARCH, transformer_config(ARCH, tensor_parallel=world)).eval()
    ids, mask, correct, gids, sids = batch()
    pooled = _pooled(model, ids, mask)
    head = _head(True, w_full, ps.get_tensor_model_parallel_group(), rank, world)
    tr = HeadTrainer(head, CFG)
    res = tr.step(pooled, correct, gids, sids, step=0)
    return {
        "pooled": pooled,
        "emb_shard": res.embeddings,
        "rewards": res.rewards,
        "grad_shard": head.proj.weight.grad.clone(),
        "loss": res.metrics["clipo/loss"],
        "positive_ids": res.positive_ids,
    }


def _phase_dp(rank, world, w_full):
    ps = _reinit(tp=1, pp=1)
    torch.manual_seed(0)
    model = build_gpt_model(ARCH).eval()
    ids, mask, correct, gids, sids = batch()
    rows = torch.arange(rank, ids.shape[0], world)  # every group spans both ranks
    pooled = _pooled(model, ids[rows], mask[rows])
    head = _head(False, w_full)
    tr = HeadTrainer(head, CFG, dp_group=ps.get_data_parallel_group())
    res = tr.step(pooled, correct[rows], gids[rows], sids[rows], step=0)
    return {
        "rows": rows,
        "pooled": pooled,
        "rewards": res.rewards,
        "grad": head.proj.weight.grad.clone(),
        "weight_after": head.proj.weight.detach().clone(),
        "loss": res.metrics["clipo/loss"],
        "positive_ids": res.positive_ids,
    }


def _phase_pp(rank, world, w_full, full_state):
    import torch.distributed as dist

    from clipo_megatron.megatron.gather import broadcast_from_last_stage

    ps = _reinit(tp=1, pp=world)
    first, last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
    model = build_gpt_model(
        ARCH,
        transformer_config(ARCH, pipeline_parallel=world),
        pre_process=first,
        post_process=last,
    ).eval()
    offset = rank * (ARCH.num_layers // world)
    state = {}
    for k in model.state_dict():
        if k.startswith("decoder.layers."):
            parts = k.split(".")
            parts[2] = str(int(parts[2]) + offset)
            state[k] = full_state[".".join(parts)]
        else:
            state[k] = full_state[k]
    model.load_state_dict(state, strict=True)
    ids, mask, correct, gids, sids = batch()
    pos = torch.arange(SEQ).expand_as(ids)
    pp_group = ps.get_pipeline_model_parallel_group()
    ranks = dist.get_process_group_ranks(pp_group)
    out = {}
    with torch.no_grad():
        if first:
            h = model(ids, pos, causal_mask(SEQ))  # [S, B, D] before the final norm
            dist.send(h.contiguous(), dst=ranks[1])
            rewards = None
        else:
            buf = torch.empty(SEQ, ids.shape[0], ARCH.hidden_size)
            dist.recv(buf, src=ranks[0])
            model.set_input_tensor(buf)
            out["pooled"] = forward_and_pool(model, mask, ids, pos, causal_mask(SEQ))[1]
    if last:
        head = _head(False, w_full)
        res = HeadTrainer(head, CFG).step(out["pooled"], correct, gids, sids, step=0)
        rewards = res.rewards
        out["grad"] = head.proj.weight.grad.clone()
    out["rewards"] = broadcast_from_last_stage(
        rewards, pp_group=pp_group, shape=(ids.shape[0],), dtype=torch.float32
    )
    return out


def _worker(rank, world, w_full, full_state):
    return {
        "pooling": _phase_pooling(rank, world),
        "tp": _phase_tp(rank, world, w_full),
        "dp": _phase_dp(rank, world, w_full),
        "pp": _phase_pp(rank, world, w_full, full_state),
    }


@pytest.fixture(scope="module")
def results_and_reference(mcore_single_process):
    torch.manual_seed(0)
    model = build_gpt_model(ARCH).eval()
    ids, mask, correct, gids, sids = batch()
    pooled = _pooled(model, ids, mask)
    torch.manual_seed(1)
    w_full = torch.randn(CFG.embed_dim, ARCH.hidden_size) * 0.1
    head = _head(False, w_full)
    ref_emb = head(pooled).detach()
    res = HeadTrainer(head, CFG).step(pooled, correct, gids, sids, step=0)
    ref = {
        "pooled": pooled,
        "emb": ref_emb,
        "rewards": res.rewards,
        "grad": head.proj.weight.grad.clone(),
        "weight_after": head.proj.weight.detach().clone(),
        "loss": res.metrics["clipo/loss"],
        "positive_ids": res.positive_ids,
    }
    full_state = copy.deepcopy(model.state_dict())
    return run_distributed(_worker, 2, w_full, full_state), ref


def test_sp_cp_thd_pooling_equals_unsharded_and_sends_d_floats(results_and_reference):
    results, _ = results_and_reference
    for rank in (0, 1):
        out = results[rank]["pooling"]
        full = mean_from_sums(*masked_sum_and_count(out["hidden"], out["mask"], layout="sbd"))
        for key in ("sp", "cp"):
            torch.testing.assert_close(out[key], full, rtol=1e-6, atol=1e-6)
        # THD stream is the first 8 / 4 / 8 positions of each sequence.
        trunc = out["mask"].clone()
        trunc[1, 4:] = False
        torch.testing.assert_close(
            out["thd"],
            mean_from_sums(*masked_sum_and_count(out["hidden"], trunc, layout="sbd")),
            rtol=1e-6,
            atol=1e-6,
        )
        # Each layout issued one all-reduce of [B, D] = D floats per sequence, nothing else.
        assert out["collective_shapes"] == [(3, 6)] * 3


def test_tp2_matches_single_process(results_and_reference):
    results, ref = results_and_reference
    half = CFG.embed_dim // 2
    for rank in (0, 1):
        out = results[rank]["tp"]
        torch.testing.assert_close(out["pooled"], ref["pooled"], **TOL)
        torch.testing.assert_close(
            out["emb_shard"], (ref["pooled"] @ _w(ref)[rank * half : (rank + 1) * half].T), **TOL
        )
        torch.testing.assert_close(out["rewards"], ref["rewards"], **TOL)
        torch.testing.assert_close(
            out["grad_shard"], ref["grad"][rank * half : (rank + 1) * half], **TOL
        )
        assert out["loss"] == pytest.approx(ref["loss"], rel=1e-5)


def _w(ref):
    torch.manual_seed(1)
    return torch.randn(CFG.embed_dim, ARCH.hidden_size) * 0.1


def test_dp2_matches_single_process(results_and_reference):
    results, ref = results_and_reference
    for rank in (0, 1):
        out = results[rank]["dp"]
        rows = out["rows"]
        torch.testing.assert_close(out["pooled"], ref["pooled"][rows], **TOL)
        torch.testing.assert_close(out["rewards"], ref["rewards"][rows], **TOL)
        torch.testing.assert_close(out["grad"], ref["grad"], **TOL)
        torch.testing.assert_close(out["weight_after"], ref["weight_after"], **TOL)
        assert out["loss"] == pytest.approx(ref["loss"], rel=1e-5)


def test_pp2_matches_single_process(results_and_reference):
    results, ref = results_and_reference
    torch.testing.assert_close(results[1]["pp"]["pooled"], ref["pooled"], **TOL)
    torch.testing.assert_close(results[1]["pp"]["grad"], ref["grad"], **TOL)
    for rank in (0, 1):  # the first stage receives the last stage's rewards
        torch.testing.assert_close(results[rank]["pp"]["rewards"], ref["rewards"], **TOL)


def test_same_positive_on_every_rank_for_every_anchor(results_and_reference):
    results, ref = results_and_reference
    assert int((ref["positive_ids"] >= 0).sum()) > 0
    for rank in (0, 1):  # TP ranks compute every anchor: identical draws
        assert torch.equal(results[rank]["tp"]["positive_ids"], ref["positive_ids"])
        dp = results[rank]["dp"]  # DP ranks compute their own anchors against gathered groups
        assert torch.equal(dp["positive_ids"], ref["positive_ids"][dp["rows"]])
