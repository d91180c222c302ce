# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Worker side: pooling microbatches (padded / packed) in the logprob pass, the head step in any row
order and across 2 DP ranks (gloo), head checkpoints, the head kept out of the model's state dict."""

from __future__ import annotations

import pytest
import torch

from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.head_step import assemble_rows
from clipo_megatron.nemo_rl.worker import (
    SAMPLE_IDX_KEY,
    ClipoWorkerState,
    MicrobatchPooler,
    WorkerPassState,
    find_final_norm,
    packed_response_mask,
)

pytestmark = pytest.mark.mcore  # the head trainer / pooling live in clipo_megatron.megatron


def _rows(seed=0, b=3, s=8, h=4):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, s, h, generator=gen)
    lengths = torch.tensor([8, 5, 6])[:b]
    mask = torch.zeros(b, s)
    for i, (p, n) in enumerate(zip([2, 1, 3], lengths.tolist())):
        mask[i, p:n] = 1  # response tokens between the prompt and the row's end
    ref = torch.stack([hidden[i][mask[i].bool()].mean(0) for i in range(b)])  # [b, h]
    return hidden, mask, lengths, ref


def test_pool_padded_microbatch():
    hidden, mask, lengths, ref = _rows()
    pooler = MicrobatchPooler()
    mb = {
        "data_dict": {
            SAMPLE_IDX_KEY: torch.tensor([4, 0, 2]),
            "token_mask": mask,
            "input_lengths": lengths,
        }
    }
    assert list(pooler.tee([mb])) == [mb]
    pooler.pool(
        torch.cat([hidden, torch.zeros(3, 2, 4)], 1).transpose(0, 1)
    )  # [S + 2 pad, b, h] (sbd)
    rows, pooled = pooler.result()
    assert rows.tolist() == [4, 0, 2]
    torch.testing.assert_close(pooled, ref, rtol=0, atol=1e-6)


def test_pool_packed_microbatch_with_trailing_pad():
    hidden, mask, lengths, ref = _rows()
    cu = torch.tensor([0, 8, 16, 24])  # every row padded to an 8-token slot
    stream = torch.zeros(24 + 8, 1, 4)  # + 8 tokens of pad-to-full (PP)
    for i in range(3):
        stream[cu[i] : cu[i] + lengths[i], 0] = hidden[i, : lengths[i]]
    sm, cu2 = packed_response_mask(mask, lengths, cu, 32)
    assert sm.sum() == mask.sum() and cu2.tolist() == [0, 8, 16, 24, 32]
    pooler = MicrobatchPooler()
    mb = {
        "data_dict": {
            SAMPLE_IDX_KEY: torch.tensor([1, 2, 0]),
            "token_mask": mask,
            "input_lengths": lengths,
        },
        "cu_seqlens_padded": cu,
    }
    list(pooler.tee([mb]))
    pooler.pool(stream)
    rows, pooled = pooler.result()
    torch.testing.assert_close(pooled, ref, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="exceeds its packed slot"):
        packed_response_mask(mask, torch.tensor([9, 5, 6]), cu)


def test_pooler_errors():
    pooler = MicrobatchPooler()
    with pytest.raises(ValueError, match="clipo_sample_idx"):
        list(pooler.tee([{"data_dict": {"token_mask": torch.ones(1, 2)}}]))
    with pytest.raises(RuntimeError, match="no pending"):
        MicrobatchPooler().pool(torch.zeros(2, 1, 4))
    p = MicrobatchPooler()
    list(
        p.tee([{"data_dict": {SAMPLE_IDX_KEY: torch.tensor([0]), "token_mask": torch.ones(1, 2)}}])
    )
    with pytest.raises(RuntimeError, match="never reached the final norm"):
        p.result()


def _head(d_in=4, d=6, seed=0):
    from clipo_megatron.core.contrastive_loss import l2_normalize

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(d_in, d, bias=False)

        def forward(self, x):
            return l2_normalize(self.proj(x.float()))

    torch.manual_seed(seed)
    return Head()


def _batch(seed=1, b=12, h=4):
    gen = torch.Generator().manual_seed(seed)
    pooled = torch.randn(b, h, generator=gen)
    groups = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0])
    return pooled, groups, correct


CFG = ClipoNemoRLConfig.from_dict({"method": {"embed_dim": 6, "seed": 7}})


def test_head_step_is_row_order_invariant_and_checkpoint_exact(tmp_path):
    pooled, groups, correct = _batch()
    a = ClipoWorkerState(CFG, _head())
    a.record(torch.arange(12), pooled)
    ra = a.head_step(correct, groups, step=0)
    perm = torch.tensor([5, 0, 11, 3, 8, 1, 10, 2, 7, 4, 9, 6])  # e.g. NeMo-RL's length sort
    b = ClipoWorkerState(CFG, _head())
    b.record(perm, pooled[perm])
    rb = b.head_step(correct, groups, step=0)
    r1 = assemble_rows([(ra["sample_idx"], ra["rewards"])], 12)
    r2 = assemble_rows([(rb["sample_idx"], rb["rewards"])], 12)
    torch.testing.assert_close(r1, r2, rtol=0, atol=1e-6)
    assert (r1[correct == 0] == 0).all() and (r1 <= 0).all() and (r1 >= -0.5).all()
    torch.testing.assert_close(a.head.proj.weight, b.head.proj.weight, rtol=0, atol=1e-6)
    # checkpoint: save after step 0, load into a fresh state, step 1 identical
    a.save(str(tmp_path), extra={"step": 1})
    c = ClipoWorkerState(CFG, _head(seed=99))
    assert c.load(str(tmp_path)) == {"step": 1}
    for s in (a, c):
        s.record(torch.arange(12), pooled * 1.5)
    x, y = a.head_step(correct, groups, step=1), c.head_step(correct, groups, step=1)
    assert torch.equal(x["rewards"], y["rewards"]) and torch.equal(
        a.head.proj.weight, c.head.proj.weight
    )
    with pytest.raises(FileNotFoundError, match="clipo.enabled=false"):
        c.load(str(tmp_path / "nope"))
    with pytest.raises(RuntimeError, match="before any logprob pass"):
        c.head_step(correct, groups, step=2)


def test_a_head_file_of_another_format_is_refused_naming_it(tmp_path):
    """One layout of head.pt (`format_version` 1): another version, none, or only the per-rank
    files of an earlier layout is one error naming the file and the fix, never a guess."""
    from clipo_megatron.nemo_rl.worker import HEAD_FILE, HEAD_FORMAT

    a = ClipoWorkerState(CFG, _head())
    path = a.save(str(tmp_path / "step"), extra={"step": 1})
    saved = torch.load(path, weights_only=True)
    assert saved["format_version"] == HEAD_FORMAT == 1
    assert ClipoWorkerState(CFG, _head(seed=5)).load(str(tmp_path / "step")) == {"step": 1}
    for version in (2, None):
        bad = {k: v for k, v in saved.items() if k != "format_version"}
        if version is not None:
            bad["format_version"] = version
        torch.save(bad, path)
        what = "no format version" if version is None else "format version 2"
        with pytest.raises(ValueError, match=f"{path} has {what}; .*clipo.enabled=false"):
            ClipoWorkerState(CFG, _head()).load(str(tmp_path / "step"))
    per_rank = tmp_path / "old" / CFG.head_checkpoint_dir
    per_rank.mkdir(parents=True)
    torch.save(saved, per_rank / "head_tp0.pt")
    assert not (per_rank / HEAD_FILE).exists()
    with pytest.raises(FileNotFoundError, match="no CLIPO head checkpoint"):
        ClipoWorkerState(CFG, _head()).load(str(tmp_path / "old"))


def _inspected_worker():
    """The checks' reads over the product's worker mixin, as the test workers combine them."""
    from clipo_megatron.nemo_rl.worker import ClipoWorkerMixin
    from clipo_testkit.nemo_rl.inspection import InspectionMixin

    class Worker(InspectionMixin, ClipoWorkerMixin):
        pass

    worker = Worker()
    worker._clipo = WorkerPassState(head_state=ClipoWorkerState(CFG, _head()))
    return worker


def test_a_head_state_read_before_a_step_keeps_its_values():
    """`clipo_head_state` (clipo_testkit/nemo_rl/inspection.py) returns copies also on a host head, where
    `.cpu()` is the live tensor: a check reading the head before a step must not see the step's
    result (it did)."""
    pooled, groups, correct = _batch()
    worker = _inspected_worker()
    w0 = worker._clipo.head_state.head.proj.weight.detach().clone()
    before = worker.clipo_head_state()
    worker._clipo.head_state.record(torch.arange(12), pooled)
    worker.clipo_head_step(correct=correct, group_ids=groups, step=0)
    after = worker.clipo_head_state()
    assert not torch.equal(after["head"]["proj.weight"], w0)  # the step moved the head
    assert torch.equal(before["head"]["proj.weight"], w0)
    assert before["optimizer"]["state"] == {} and after["optimizer"]["state"][0]["step"] == 1


def test_the_inspected_worker_reports_what_the_head_step_pooled():
    """`clipo_last_pooled`: the rows and states the last head step consumed ({} before one)."""
    pooled, groups, correct = _batch()
    worker = _inspected_worker()
    assert worker.clipo_last_pooled() == {}
    rows = torch.arange(11, -1, -1)
    worker._clipo.head_state.record(rows, pooled)
    worker.clipo_head_step(correct=correct, group_ids=groups, step=0)
    seen = worker.clipo_last_pooled()
    assert torch.equal(seen["rows"], rows) and torch.equal(seen["pooled"], pooled.float())
    assert worker._clipo.head_state.pooled is None  # the product's step consumed them


def test_head_not_in_model_state_dict():
    from clipo_megatron.megatron.head import attach_head

    class Model(torch.nn.Module):
        post_process = True

        def __init__(self):
            super().__init__()
            self.decoder = torch.nn.Module()
            self.decoder.final_layernorm = torch.nn.LayerNorm(4)

    m = Model()
    keys = set(m.state_dict())
    attach_head(m, _head())  # even hung on the model (engineer A's helper), it is not registered
    assert set(m.state_dict()) == keys
    assert find_final_norm([torch.nn.Module(), m]) is m.decoder.final_layernorm


def test_the_final_norm_is_found_through_megatron_cores_wrappers():
    """NeMo-RL's worker holds [DDP(Float16Module(GPTModel))] chunks (bf16): Megatron-Core's
    `unwrap_model` reaches the model; a stage without `post_process` has no norm to hook."""
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    class Model(torch.nn.Module):
        def __init__(self, post_process: bool):
            super().__init__()
            self.post_process = post_process
            self.decoder = torch.nn.Module()
            self.decoder.final_layernorm = torch.nn.LayerNorm(4)

    config = TransformerConfig(num_layers=1, hidden_size=4, num_attention_heads=1, bf16=True)
    first, last = Model(post_process=False), Model(post_process=True)
    chunks = [Float16Module(config, first), Float16Module(config, last)]
    assert find_final_norm(chunks) is last.decoder.final_layernorm
    assert find_final_norm(chunks[0]) is None
    assert find_final_norm(torch.nn.Linear(2, 2)) is None


def _dp_worker(rank, world, rows_per_rank):
    import torch.distributed as dist

    pooled, groups, correct = _batch()
    rows = torch.tensor(rows_per_rank[rank])
    st = ClipoWorkerState(CFG, _head(), dp_group=dist.group.WORLD)
    st.record(rows, pooled[rows])
    out = st.head_step(correct, groups, step=0)
    # plain lists: tensors through the queue would need the (exiting) sender's shared memory
    return {
        "idx": out["sample_idx"].tolist(),
        "r": out["rewards"].tolist(),
        "w": st.head.proj.weight.detach().tolist(),
        "metrics": out["metrics"],
    }


@pytest.mark.multiprocess
def test_head_step_two_dp_ranks_match_one_process():
    from tests.megatron.dist_utils import run_distributed

    pooled, groups, correct = _batch()
    single = ClipoWorkerState(CFG, _head())
    single.record(torch.arange(12), pooled)
    ref = single.head_step(correct, groups, step=0)
    shards = [[7, 0, 3, 10, 5], [2, 11, 1, 8, 4, 9, 6]]  # groups split across ranks, sorted order
    res = run_distributed(_dp_worker, 2, shards, timeout=120)
    r = assemble_rows(
        [(torch.tensor(res[k]["idx"]), torch.tensor(res[k]["r"])) for k in (0, 1)], 12
    )
    torch.testing.assert_close(r, ref["rewards"], rtol=0, atol=1e-6)
    for k in (0, 1):
        torch.testing.assert_close(
            torch.tensor(res[k]["w"]), single.head.proj.weight.detach(), rtol=0, atol=1e-6
        )
        assert res[k]["metrics"]["clipo/num_anchors"] == ref["metrics"]["clipo/num_anchors"]
