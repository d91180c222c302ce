# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The TransferQueue loop (`data_plane.enabled`, NeMo-RL's `grpo_train_sync`) without NeMo-RL:
the driver runs it with CLIPO's estimator rebound in grpo_sync's namespace, the workers map
their shard's sample ids to the driver's rows, the policy announces them and holds
`train_from_meta` in the warm-up, and the loop's seams read NeMo-RL's source. NeMo-RL's real
grpo_train_sync with CLIPO: `test_contract_tq.py`."""

from __future__ import annotations

import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from clipo_megatron.nemo_rl.advantage_estimator import ClipoAdvantageEstimator, ClipoRunState
from clipo_megatron.nemo_rl.driver import grpo_train_with_clipo
from clipo_megatron.nemo_rl.port import transfer_queue
from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY, ClipoWorkerMixin, WorkerPassState
from tests.nemo_rl.test_driver_loops import POLICY, Base, _args

# ------------------------------------------------------------------------------- the driver


class Checkpointer:
    def __init__(self, events: list):
        self.events = events

    def __enter__(self):
        self.events.append("enter")

    def __exit__(self, *exc):
        self.events.append("exit")


def fake_grpo_sync(events: list) -> types.SimpleNamespace:
    """grpo_sync as NeMo-RL's: its own `_create_advantage_estimator` name (imported from grpo)."""
    mod = types.SimpleNamespace(_create_advantage_estimator=lambda cfg: Base())

    def grpo_train_sync(policy, *args):
        events.append(("grpo_train_sync", args, mod._create_advantage_estimator(args[-1])))

    mod.grpo_train_sync = grpo_train_sync
    return mod


def test_the_driver_runs_grpo_train_sync_with_clipos_estimator_inside_the_checkpointer(
    monkeypatch,
):
    monkeypatch.delenv("CLIPO_SAVE_BY", raising=False)
    events: list = []
    sync = fake_grpo_sync(events)
    monkeypatch.setattr(transfer_queue, "grpo_sync_module", lambda: sync)
    grpo = types.SimpleNamespace(_create_advantage_estimator=lambda cfg: Base())  # not grpo_sync's
    args = replace(_args(async_on=False, data_plane=True), checkpointer=Checkpointer(events))
    original = sync._create_advantage_estimator
    assert grpo_train_with_clipo(grpo, None, None, POLICY, args) is None
    [enter, (name, passed, estimator), leave] = events
    assert (enter, name, leave) == ("enter", "grpo_train_sync", "exit")  # as run_grpo.py: `with`
    assert passed[8] is args.checkpointer and passed[-1] is args.master_config  # 11, in order
    assert isinstance(estimator, ClipoAdvantageEstimator) and isinstance(estimator.base, Base)
    assert sync._create_advantage_estimator is original  # the rebinding is undone


def test_without_grpo_syncs_own_name_the_estimator_would_be_grpos():
    """Rebinding `grpo`'s attribute alone does not reach grpo_train_sync (it imported the name):
    the reason the driver rebinds grpo_sync's. Broken on purpose: rebind grpo only."""
    from clipo_megatron.nemo_rl.port.rebinding import advantage_estimator_installed

    events: list = []
    sync = fake_grpo_sync(events)
    grpo = types.SimpleNamespace(_create_advantage_estimator=lambda cfg: Base())
    with advantage_estimator_installed(grpo, lambda base: ("wrapped", base)):
        sync.grpo_train_sync(None, {})
    assert isinstance(events[0][2], Base)  # NeMo-RL's own estimator: r' = r, silently


# ------------------------------------------------------------------------------- the worker


class FakeTQWorker:
    """What CLIPO's mixin meets in NeMo-RL's worker: `TQWorkerMixin.get_logprobs_presharded`
    fetches the shard's rows in `meta.sample_ids` order and calls `self.get_logprobs(data=)`
    (once for prev_logprobs; the reference pass calls it again)."""

    def __init__(self):
        self.seen: list = []

    def get_logprobs_presharded(self, meta, micro_batch_size=None):
        self.fetched = _Data(len(meta.sample_ids))
        self.get_logprobs(data=self.fetched, micro_batch_size=micro_batch_size)

    def get_reference_policy_logprobs_presharded(self, meta, micro_batch_size=None):
        self.get_logprobs(data=_Data(len(meta.sample_ids)), micro_batch_size=micro_batch_size)

    def get_logprobs(self, *, data, micro_batch_size=None):
        self.seen.append(data.get(SAMPLE_IDX_KEY))


class _Data(dict):
    def __init__(self, n: int):
        super().__init__(input_ids=torch.zeros(n, 4))
        self.size = n


class Worker(ClipoWorkerMixin, FakeTQWorker):
    """The mixin with its pooling stood in (its own tests: test_worker.py): what reaches the
    worker's get_logprobs is what this file checks."""

    def __init__(self):
        super().__init__()
        self._clipo = WorkerPassState()  # as clipo_setup leaves it off the last stage

    def get_logprobs(self, *, data, micro_batch_size=None, **kwargs):
        rows = self._clipo.take_shard_rows()
        if rows is not None:
            data[SAMPLE_IDX_KEY] = rows
        return FakeTQWorker.get_logprobs(self, data=data, micro_batch_size=micro_batch_size)


def _meta(ids):
    return types.SimpleNamespace(sample_ids=list(ids))


def test_a_shard_carries_the_drivers_row_of_each_sample_id_into_the_prev_logprob_pass():
    w = Worker()
    w.clipo_expect_rows(sample_ids=["s0", "s1", "s2", "s3", "s4"])
    w.get_logprobs_presharded(_meta(["s3", "s0", "s4"]))  # a DP shard, re-ordered by packing
    assert torch.equal(w.seen[0], torch.tensor([3, 0, 4]))
    w.get_reference_policy_logprobs_presharded(_meta(["s3", "s0", "s4"]))
    w.get_logprobs_presharded(_meta(["s1"]))  # no announcement: nothing pools
    assert w.seen[1:] == [None, None]


def _real(nemo_rl_worker: type = FakeTQWorker) -> Any:
    """ClipoWorkerMixin itself over `nemo_rl_worker`, pooling on a stage without the head."""

    class Real(ClipoWorkerMixin, nemo_rl_worker):
        _clipo_iterator_module = types.SimpleNamespace(
            get_microbatch_iterator=lambda *a, **k: (iter([]), 0)
        )

    w = Real()
    w._clipo = WorkerPassState()  # as clipo_setup leaves it off the last stage
    return w


def test_the_real_mixin_attaches_the_rows_in_place():
    """ClipoWorkerMixin.get_logprobs itself (not the stand-in above) puts the rows in the
    worker's own fetched data object: its packing metadata are attributes of that object, which
    a copy would drop."""
    w = _real()
    w.clipo_expect_rows(sample_ids=["a", "b", "c"])
    w.get_logprobs_presharded(_meta(["c", "a"]))
    assert torch.equal(w.seen[0], torch.tensor([2, 0]))
    assert w.fetched[SAMPLE_IDX_KEY] is w.seen[0]  # in place, on the fetched object


def test_a_shard_with_an_unannounced_sample_or_another_size_is_one_error():
    w = Worker()
    w.clipo_expect_rows(sample_ids=["s0", "s1"])
    with pytest.raises(ValueError, match=r"sample ids \['zz'\] the driver did not announce"):
        w.get_logprobs_presharded(_meta(["s0", "zz"]))
    assert w._clipo.pending_rows is None and w._clipo.announced is None  # nothing for the next

    s = _real()
    s._clipo.pending_rows = torch.tensor([0, 1])  # held for a shard of two
    with pytest.raises(ValueError, match="2 announced rows for a shard of 1"):
        ClipoWorkerMixin.get_logprobs(s, data=_Data(1))


def test_the_rows_of_a_failed_pass_never_reach_the_next_one():
    """A prev-logprob pass that fails inside NeMo-RL leaves no rows behind: the reference pass
    and the next step's unannounced pass run NeMo-RL's own get_logprobs, pooling nothing."""

    class Failing(FakeTQWorker):
        fail = True

        def get_logprobs_presharded(self, meta, micro_batch_size=None):
            if self.fail:
                raise RuntimeError("fetch failed")
            super().get_logprobs_presharded(meta, micro_batch_size)

    w = _real(Failing)
    w.clipo_expect_rows(sample_ids=["a", "b"])
    with pytest.raises(RuntimeError, match="fetch failed"):
        w.get_logprobs_presharded(_meta(["b", "a"]))
    w.fail = False
    w.get_reference_policy_logprobs_presharded(_meta(["b", "a"]))
    w.get_logprobs_presharded(_meta(["b", "a"]))  # the next step's pass, not announced
    assert w.seen == [None, None]


def test_an_announced_pass_whose_rows_get_logprobs_never_took_is_one_error():
    """NeMo-RL's get_logprobs_presharded must hand its fetched rows to `get_logprobs(data=)`,
    where the rows are attached and pooled; a pass that skips it would pool nothing."""

    class Skipping(FakeTQWorker):
        def get_logprobs_presharded(self, meta, micro_batch_size=None):
            return "written back"

    w = _real(Skipping)
    assert w.get_logprobs_presharded(_meta(["a"])) == "written back"  # unannounced
    w.clipo_expect_rows(sample_ids=["a"])
    with pytest.raises(RuntimeError, match="never reached get_logprobs"):
        w.get_logprobs_presharded(_meta(["a"]))
    assert w._clipo.pending_rows is None


def test_the_worker_keeps_its_clipo_state_in_one_typed_object():
    """Every hand-over between NeMo-RL's calls lives in `WorkerPassState` (`_clipo`): after an
    announced pass, a reference pass and an unannounced one the worker holds no other CLIPO
    attribute, and nothing waits for a next pass."""
    w = _real()
    w.clipo_expect_rows(sample_ids=["a", "b", "c"])
    w.get_logprobs_presharded(_meta(["c", "a"]))
    w.get_reference_policy_logprobs_presharded(_meta(["c", "a"]))
    w.get_logprobs_presharded(_meta(["b"]))
    assert (
        w.clipo_head_step(correct=torch.ones(3), group_ids=torch.zeros(3), step=0)["metrics"] == {}
    )
    assert sorted(k for k in vars(w) if "clipo" in k) == ["_clipo"]
    assert isinstance(w._clipo, WorkerPassState)
    assert (w._clipo.announced, w._clipo.pending_rows) == (None, None)
    assert w.seen[1:] == [None, None]


def test_an_announcement_before_clipo_setup_is_one_error():
    w = _real()
    w._clipo = None  # CLIPO off: clipo_setup never ran
    with pytest.raises(RuntimeError, match="clipo_expect_rows before clipo_setup"):
        w.clipo_expect_rows(sample_ids=["a"])
    w.get_logprobs_presharded(_meta(["a"]))  # NeMo-RL's own pass
    assert w.seen == [None]


# ------------------------------------------------------------------------------- the policy


class FakeTQPolicy:
    def __init__(self, *args, dp_cfg, **kwargs):
        self.dp_cfg, self.calls = dp_cfg, []

    def run_all_workers_single_data(self, method, **kwargs):
        self.calls.append((method, kwargs))
        return []

    def get_logprobs_from_meta(self, meta, micro_batch_size=None, timer=None):
        self.calls.append(("get_logprobs_from_meta", list(meta.sample_ids)))

    def train_from_meta(self, meta, loss_fn, timer=None, train_fields=()):
        self.calls.append(("train_from_meta", train_fields))
        return "trained"

    def read_from_dataplane(self, meta, *, select_fields, pad_value_dict=None):
        self.calls.append(("read", tuple(select_fields)))
        b, s = len(meta.sample_ids), 5
        return {
            "token_mask": torch.ones(b, s),
            "sample_mask": torch.ones(b),
            "prev_logprobs": torch.full((b, s), -1.0),
        }


def _policy(cfg, state, monkeypatch):
    from clipo_megatron.nemo_rl import policy as policy_module

    monkeypatch.setattr(policy_module, "register_worker_env", lambda fqn: None)
    cls = type(
        "P",
        (policy_module.ClipoTQPolicyMixin, FakeTQPolicy),
        {"clipo_cfg": cfg, "clipo_state": state, "clipo_dp_cfg": {"enabled": True}},
    )
    return cls()


def _cfg(enabled: bool, warmup: int):
    from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig

    return ClipoNemoRLConfig.from_dict({"enabled": enabled, "method": {"warmup_steps": warmup}})


def test_the_policy_announces_the_rows_then_runs_the_pass_and_holds_training_in_warmup(
    monkeypatch,
):
    state = ClipoRunState()
    p = _policy(_cfg(True, 1), state, monkeypatch)
    assert p.dp_cfg == {"enabled": True}  # run_grpo.py's factory passes the recipe's block
    meta = _meta(["x", "y"])
    p.get_logprobs_from_meta(meta, timer=None)
    assert [c[0] for c in p.calls[-2:]] == ["clipo_expect_rows", "get_logprobs_from_meta"]
    assert p.calls[-2][1] == {"sample_ids": ["x", "y"]}
    state.step = 1  # step 0's advantages computed: train() of step 0, inside the warm-up

    def loss_fn(next_token_logprobs, data, global_valid_seqs, global_valid_toks):
        return torch.zeros(()), {"probs_ratio": 1.0}

    out = p.train_from_meta(meta, loss_fn, train_fields=("input_ids", "advantages", "token_mask"))
    assert ("read", ("advantages", "token_mask")) in p.calls  # the tokens stay in TransferQueue
    assert not any(c[0] == "train_from_meta" for c in p.calls)  # held
    assert out["all_mb_metrics"]["clipo_warmup"] == [1.0]
    state.step = 2
    assert p.train_from_meta(meta, loss_fn) == "trained"  # after the warm-up NeMo-RL trains


def test_the_baseline_announces_nothing(monkeypatch):
    p = _policy(_cfg(False, 0), ClipoRunState(), monkeypatch)
    p.get_logprobs_from_meta(_meta(["x"]))
    assert [c[0] for c in p.calls] == ["get_logprobs_from_meta"]


# -------------------------------------------------------------------------------- the seams

SYNC_SRC = """
from nemo_rl.algorithms.grpo import _create_advantage_estimator


def grpo_train_sync(policy, policy_generation, wrapped_dataloader, val_dataloader, tokenizer,
                    loss_fn, task_to_env, val_task_to_env, logger, checkpointer, grpo_save_state,
                    master_config):
    adv_estimator = _create_advantage_estimator(master_config)
    policy.get_logprobs_from_meta(meta, timer=timer)
    advantages = adv_estimator.compute_advantage(prompt_ids=1, rewards=2, mask=3)
    policy.train_from_meta(meta, loss_fn=loss_fn)
"""
WORKER_SRC = """
class TQWorkerMixin:
    def get_logprobs_presharded(self, meta, micro_batch_size=None):
        data = self._fetch(meta)
        result = self.get_logprobs(data=data, micro_batch_size=micro_batch_size)
"""
POLICY_SRC = """
class TQPolicy(Policy):
    def __init__(self, *args, dp_cfg, tq_partition_id="train", **kwargs):
        pass

    def get_logprobs_from_meta(self, meta, micro_batch_size=None, timer=None):
        pass

    def train_from_meta(self, meta, loss_fn, timer=None, train_fields=()):
        pass

    def read_from_dataplane(self, meta, *, select_fields, pad_value_dict=None):
        pass
"""
SYNC_MOVES = {
    "in place": ("grpo_sync", lambda s: s, None),
    "estimator imported inside": (
        "grpo_sync",
        lambda s: s.replace("from nemo_rl.algorithms.grpo import _create_advantage_estimator\n", "")
        .replace("_create_advantage_estimator(master_config)", "build(master_config)"),
        "no module-level _create_advantage_estimator",
    ),
    "logprobs after the advantages": (
        "grpo_sync",
        lambda s: s.replace("    policy.get_logprobs_from_meta(meta, timer=timer)\n", "")
        + "    policy.get_logprobs_from_meta(meta)\n",
        "does not call policy.get_logprobs_from_meta before compute_advantage",
    ),
    "trains without the meta": (
        "grpo_sync",
        lambda s: s.replace("train_from_meta", "train"),
        "does not call policy.train_from_meta",
    ),
    "worker fetches another way": (
        "worker",
        lambda s: s.replace("self.get_logprobs(data=data, ", "self.forward(data, "),
        "does not call self.get_logprobs(data=...)",
    ),
    "policy without dp_cfg": (
        "policy",
        lambda s: s.replace("*args, dp_cfg, ", "*args, "),
        "dp_cfg",
    ),
}  # fmt: skip


@pytest.mark.parametrize("move", list(SYNC_MOVES))
def test_the_transferqueue_loops_seams_are_one_line_when_they_move(move, tmp_path):
    from clipo_megatron.source_match import Source, moved_seams

    which, edit, found = SYNC_MOVES[move]
    files = {
        "grpo_sync": ("algorithms/grpo_sync.py", SYNC_SRC),
        "worker": ("data_plane/worker_mixin.py", WORKER_SRC),
        "policy": ("models/policy/tq_policy.py", POLICY_SRC),
    }
    for key, (rel, text) in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(edit(text) if key == which else text)
    moved = moved_seams(transfer_queue.TQ_SEAMS, Source(tmp_path))
    if found is None:
        assert moved == []
    else:
        [(seam, _, where, line)] = moved
        assert where.startswith(files[which][0]) and found in line, (seam.name, line)


def test_the_transferqueue_loops_seams_in_the_checkout():
    """NeMo-RL's own grpo_sync.py, TQPolicy and TQWorkerMixin (NEMO_RL_SRC, else the 7ea279a
    source beside this checkout)."""
    import os

    from clipo_megatron.source_match import Source, moved_seams

    snapshot = Path(__file__).resolve().parents[3] / "shared" / "upstream" / "NeMo-RL-7ea279a"
    src = Path(os.environ.get("NEMO_RL_SRC") or snapshot)
    if not (src / "nemo_rl" / "algorithms" / "grpo_sync.py").is_file():
        pytest.skip(f"no NeMo-RL checkout: set NEMO_RL_SRC=<dir> or lay the source at {snapshot}")
    assert moved_seams(transfer_queue.TQ_SEAMS, Source(src / "nemo_rl")) == []


def test_the_preflight_reads_the_transferqueue_seams_for_its_recipes_only():
    from clipo_megatron.nemo_rl.port import loops
    from clipo_megatron.nemo_rl.port.grpo_loop import ASYNC_SEAMS
    from clipo_megatron.nemo_rl.port.seams import loop_seams_of

    assert loop_seams_of(loops.GRPO_TRAIN_SYNC) == transfer_queue.TQ_SEAMS
    assert loop_seams_of(loops.ASYNC_GRPO_TRAIN) == ASYNC_SEAMS
    assert loop_seams_of(loops.GRPO_TRAIN) == ()
