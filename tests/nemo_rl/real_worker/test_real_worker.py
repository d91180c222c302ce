# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own Megatron policy worker with the project's extension, on CPU (docs/nemo_rl.md).

The product's `ClipoMegatronPolicyWorkerImpl` (`ClipoWorkerMixin` over NeMo-RL's
`MegatronPolicyWorkerImpl`, unchanged) is built by NeMo-RL's real `__init__` (HF import through
Megatron-Bridge, Bridge's initialize / model / DDP / optimizer / scheduler setup, reference model)
with the CUDA and NCCL calls patched from outside (`patch_lines.PATCHES`), over gloo, fp32. Then its
real `get_logprobs` (NeMo-RL's packing, `get_microbatch_iterator`, `megatron_forward_backward`,
`LogprobsPostProcessor`) with the CLIPO pooler, `train` (`SequencePackingLossWrapper`, mcore DDP,
the optimizer step), `save_checkpoint` and a resume by construction in fresh processes are compared
with a Hugging Face reference computed by hand in `scenario.py`.

Run with `NEMO_RL_SRC=<checkout> bash scripts/test_nemo_rl.sh` (BRIDGE_SRC, MEGATRON_LM_SRC: its submodules unless set).
"""

from __future__ import annotations

import os

import pytest
import torch

from clipo_testkit.nemo_rl.real_worker.build import requirements

pytestmark = pytest.mark.nemo_rl


@pytest.fixture(scope="module")
def sources():
    missing = requirements()
    if missing:
        pytest.skip(missing)
    os.environ["NEMO_RL_ROOT"] = os.environ["NEMO_RL_SRC"]


def test_every_patch_still_matches_its_source_line(sources):
    from clipo_testkit.nemo_rl.real_worker.patch_lines import PATCHES, check_sources

    where = check_sources()
    assert set(where) == {p.name for p in PATCHES}
    for name, loc in where.items():
        path, line = loc.rsplit(":", 1)
        assert os.path.exists(path) and int(line) > 0, (name, loc)
    print("\n[real worker] patches:", *(f"  {k}: {v}" for k, v in where.items()), sep="\n")


def test_a_moved_source_line_fails_naming_patch_and_file(sources):
    from clipo_testkit.nemo_rl.real_worker.patch_lines import WORKER, Patch, SeamMoved, locate

    moved = Patch("set_device", WORKER, "torch.cuda.set_device(renamed_rank)", "test")
    with pytest.raises(SeamMoved, match=r"patch set_device: .*megatron_policy_worker\.py"):
        locate(moved)


def test_cp_attention_splits_and_masks_as_nemo_rl_shards(sources):
    """The test-side CP attention's positions are NeMo-RL's own zigzag split of each packed slot
    (`_get_tokens_on_this_cp_rank`), and its mask over the gathered keys is the unsharded
    block-diagonal causal mask, rows and columns moved to where the ranks hold them."""
    from nemo_rl.distributed.model_utils import _get_tokens_on_this_cp_rank

    from clipo_testkit.nemo_rl.real_worker.thd_attention import (
        cp_positions,
        cp_slot_mask,
        slot_mask,
    )

    cu, cp = torch.tensor([0, 8, 20, 24]), 2
    stream = torch.arange(24)
    held = [  # what NeMo-RL's packing puts on each CP rank
        torch.cat([_get_tokens_on_this_cp_rank(stream[a:e], r, cp, seq_dim=0) for a, e in zip(cu[:-1], cu[1:])])
        for r in range(cp)
    ]  # fmt: skip
    full = slot_mask(cu, 24)[0, 0]  # [T, T]
    keys = torch.cat(held)
    for r in range(cp):
        assert torch.equal(cp_positions(cu, cp, r), held[r])
        assert torch.equal(cp_slot_mask(cu, cp, r)[0, 0], full[held[r]][:, keys])


def test_te_stub_resolves_names_and_refuses_use():
    from clipo_testkit.nemo_rl.real_worker.te_stub import TransformerEngineStubUsed, _stub_package

    te = _stub_package().pytorch
    layer = te.ops.Sequential  # Bridge's annotations evaluate this at import
    with pytest.raises(
        TransformerEngineStubUsed, match="transformer_engine.pytorch.ops.Sequential"
    ):
        layer()
    with pytest.raises(TransformerEngineStubUsed, match="transformer_engine.pytorch.Linear"):
        isinstance(torch.nn.Linear(1, 1), te.Linear)


def _check_methods(first: dict, resumed: dict | None, model_dir, world: int) -> None:
    import transformers

    from clipo_testkit.nemo_rl.real_worker import scenario

    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    data = scenario.batch(tok.pad_token_id, len(tok))
    ref = scenario.hf_reference(model_dir, data)
    seen = []
    for rank, res in first.items():
        # clipo_setup refuses a model without a final norm, in one line naming its class, and
        # builds no head (issue 50: before the first rollout, never after one)
        assert res["refusal"].startswith("CLIPO cannot capture the final hidden states of GPTModel")
        assert "\n" not in res["refusal"] and not res["head_after_refusal"], res["refusal"]
        # get_logprobs: NeMo-RL's packed forward == a plain HF forward, row by row
        for j, row in enumerate(res["rows"].tolist()):
            n = int(res["lengths"][j])
            err = float((res["logprobs"][j, 1:n] - ref["logprobs"][row, 1:n]).abs().max())
            assert err <= 1e-5, (rank, row, err)
        seen += res["rows"].tolist()
        # the CLIPO pooler: this rank's rows, the final-norm means over the response tokens
        assert sorted(res["pooled_rows"].tolist()) == sorted(res["rows"].tolist())
        perr = float((res["pooled"] - ref["pooled"][res["pooled_rows"]]).abs().max())
        assert perr <= 1e-5, (rank, perr)
        # train: NLL on the whole (DP-sharded, packed) batch, DDP-summed grads, one Adam step
        tr = scenario.hf_train_reference(model_dir, data, res["train"]["lr"], max_norm=1.0)
        assert abs(res["train"]["loss"] - tr["loss"]) <= 1e-5 * abs(tr["loss"]), (rank, res, tr)
        assert abs(res["train"]["grad_norm"] - tr["grad_norm"]) <= 1e-5 * tr["grad_norm"]
        torch.testing.assert_close(res["norm_weight"], tr["norm_weight"], rtol=0, atol=1e-6)
        assert res["moved"] > 0
        if resumed is None:
            continue
        # resume (fresh processes, construction with weights_path): the trained weights, exactly
        back = resumed[rank]
        for key, value in res["state_after"].items():
            assert torch.equal(back["state"][key], value), key
        assert any(not torch.equal(back["state"][k], res["state_before"][k]) for k in back["state"])
        for a, b in zip(res["head"].values(), back["head"].values()):
            assert torch.equal(a, b)
        assert back["extra"] == {"step": 1}
    assert sorted(seen) == list(range(scenario.B)), seen  # DP shards cover the batch once
    print(
        f"\n[real worker] DP={world}: logprobs, pooled rows, loss, grad norm, Adam step, resume ok"
    )


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [1, 2], ids=["dp1", "dp2"])
def test_real_worker_methods_match_a_hand_reference(sources, tmp_path, world):
    from clipo_testkit.nemo_rl.real_worker import build, scenario
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks

    model_dir = build.tiny_model(tmp_path / "model")
    first = run_ranks(scenario.worker_methods, world, str(tmp_path), str(model_dir))
    resumed = run_ranks(scenario.resumed_worker, world, str(tmp_path), str(model_dir))
    _check_methods(first, resumed, model_dir, world)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_real_worker_under_emulated_cuda(sources, tmp_path):
    """The same get_logprobs and train, the worker built and run under `clipo_testkit.emulated_cuda`:
    NeMo-RL's "cuda" tensors (model, microbatches, DDP buffers) are tagged device tensors and a
    host/device mix-up or a host tensor in a collective raises as on a GPU. Same numbers."""
    from clipo_testkit.nemo_rl.real_worker import build, scenario
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks

    model_dir = build.tiny_model(tmp_path / "model")
    first = run_ranks(
        scenario.worker_methods, 1, str(tmp_path), str(model_dir), False, emulated=True
    )
    _check_methods(first, None, model_dir, 1)


def test_the_grpo_actor_has_no_coroutines(sources):
    """Ray runs an actor with any `async def` as an async actor, in no guaranteed call order; the
    CPU sampler is seeded per call, so NeMo-RL's concurrent per-sample generate_async calls would
    permute a group's rows on a resume (seen: the contract suite's resume). A NeMo-RL that adds
    a coroutine to the worker fails here, naming it."""
    import inspect

    from clipo_testkit.nemo_rl.real_worker.ray_worker import RealCpuPolicyWorkerImpl as cls

    coroutines = [
        n
        for n in dir(cls)
        if inspect.iscoroutinefunction(getattr(cls, n, None))
        or inspect.isasyncgenfunction(getattr(cls, n, None))
    ]
    assert not coroutines, f"make these sync on the CPU actor (ray_worker.py): {coroutines}"


def _rendezvous(rank: int, world: int) -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()
    return rank


@pytest.mark.contract_full
def test_a_port_taken_before_the_rendezvous_is_retried(sources, monkeypatch):
    """The port `run_ranks` picks is free when picked; a job that binds it first must cost a
    retry on another port, not the test (seen once in a full contract run: EADDRINUSE)."""
    import socket

    from clipo_testkit.nemo_rl.real_worker import spawn

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1], spawn._free_port()])
    monkeypatch.setattr(spawn, "_free_port", lambda: next(ports))
    try:
        assert spawn.run_ranks(_rendezvous, 2, timeout=120) == {0: 0, 1: 1}
    finally:
        taken.close()
    assert next(ports, None) is None  # the second port was used: the first start was retried
