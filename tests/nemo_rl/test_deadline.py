# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The job's deadline reaches NeMo-RL's `checkpointing.checkpoint_must_save_by` (issue 43, item 1).

The wiring without NeMo-RL: `CLIPO_SAVE_BY` (epoch seconds, exported by slurm/common.sh) becomes
the budget `grpo_train` measures from its own start, set the moment `grpo_train_with_clipo`
calls it; a run that saved at the deadline short of its end is reported (the driver exits 75
and the batch script requeues), one that finished or stopped for another reason is not. NeMo-RL's
real `grpo_train` saving there, CLIPO's head included: `test_contract.py::test_grpo_train_saves_at_the_deadline`.
"""

from __future__ import annotations

import time

import pytest

from clipo_megatron.nemo_rl import deadline
from clipo_megatron.nemo_rl.driver import grpo_train_with_clipo
from clipo_megatron.nemo_rl.port.grpo_loop import GrpoTrainArgs
from tests.nemo_rl.test_driver_loops import POLICY  # a policy whose workers answer nothing


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "00:00:00:00"), (-5, "00:00:00:00"), (59.9, "00:00:00:59"), (90061, "01:01:01:01")],
)  # 90061 = 86400 + 3600 + 60 + 1
def test_budget_is_nemo_rls_dd_hh_mm_ss(seconds, text):
    assert deadline.budget(seconds) == text


@pytest.mark.parametrize("raw", ["soon", "nan", "-1", "0", "inf"])
def test_a_bad_save_by_is_one_line_naming_it(raw):
    with pytest.raises(ValueError, match=r"^CLIPO_SAVE_BY='.*': must be the epoch second"):
        deadline.save_by_from_env({"CLIPO_SAVE_BY": raw})


def test_unset_means_no_deadline():
    assert deadline.save_by_from_env({}) is None
    assert deadline.save_by_from_env({"CLIPO_SAVE_BY": " "}) is None


def test_a_deadline_without_checkpointing_is_refused_before_start():
    with pytest.raises(ValueError, match="checkpointing.enabled=false"):
        deadline.check_before_start({"CLIPO_SAVE_BY": "100"}, {"checkpointing": {"enabled": False}})
    deadline.check_before_start({}, {"checkpointing": {"enabled": False}})  # no deadline: fine


def test_the_recipes_own_earlier_budget_is_kept():
    cfg = {"checkpointing": {"enabled": True, "checkpoint_must_save_by": "00:00:10:00"}}
    assert deadline.apply_save_by(cfg, save_by=10_000.0, now=0.0) == "00:00:10:00"  # 600 < 10000
    assert deadline.apply_save_by(cfg, save_by=100.0, now=0.0) == "00:00:01:40"  # 100 s is sooner


@pytest.mark.parametrize(
    ("now", "steps", "planned", "expected"),
    [
        (990.0, (0, 9), 100, True),  # 990 + 110 mean step >= 1000: NeMo-RL's deadline stop
        (500.0, (0, 9), 100, False),  # far from it: a validation early stop, not requeued
        (999.0, (0, 100), 100, False),  # the last step: finished
        (1001.0, (0, 0), 100, True),  # past the deadline before a save: still requeued
    ],
)
def test_stopped_at_deadline(now, steps, planned, expected):
    got = deadline.stopped_at_deadline(1000.0, started=0.0, now=now, steps=steps, planned=planned)
    assert got is expected


class FakeCheckpointer:
    def __init__(self, step: int):
        self.step = step

    def get_latest_checkpoint_path(self):
        return f"step_{self.step}" if self.step else None

    def load_training_info(self, path):
        return {"total_steps": self.step} if path else None


class FakeGrpo:
    """`grpo_train` as NeMo-RL runs it under a deadline: reads the budget at its start, saves
    one step (the deadline fires at its end) and returns."""

    def __init__(self):
        self.budget: str | None = None

    def _create_advantage_estimator(self, master_config):
        return object()

    def grpo_train(self, policy, *args):
        master_config, checkpointer = args[-1], args[-3]
        self.budget = master_config["checkpointing"]["checkpoint_must_save_by"]
        checkpointer.step += 1


def _args(checkpointer, steps_per_epoch=50):
    master = {
        "checkpointing": {"enabled": True, "checkpoint_must_save_by": None},
        "grpo": {"max_num_steps": 1000, "max_num_epochs": 2},
    }
    return GrpoTrainArgs(
        None, range(steps_per_epoch), None, None, None, {}, {}, None, checkpointer, {}, master
    )


def test_the_driver_sets_the_budget_at_grpo_trains_start_and_reports_the_saved_step(monkeypatch):
    grpo, ckpt = FakeGrpo(), FakeCheckpointer(step=7)  # a resumed run at step 7
    monkeypatch.setenv("CLIPO_SAVE_BY", str(time.time() + 125.5))
    saved = grpo_train_with_clipo(grpo, None, None, POLICY, _args(ckpt))
    assert grpo.budget in ("00:00:02:05", "00:00:02:04")  # 125 s left, less this test's moments
    assert saved is None  # 1 step in ~0 s and 125 s left: not the deadline's stop


def test_a_stop_at_the_deadline_is_reported_with_its_step(monkeypatch):
    grpo, ckpt = FakeGrpo(), FakeCheckpointer(step=7)
    monkeypatch.setenv("CLIPO_SAVE_BY", str(time.time() - 1))  # a budget of 0: one step, saved
    assert grpo_train_with_clipo(grpo, None, None, POLICY, _args(ckpt)) == 8
    assert grpo.budget == "00:00:00:00"


def test_without_a_deadline_nothing_is_set(monkeypatch):
    grpo, ckpt = FakeGrpo(), FakeCheckpointer(step=0)
    monkeypatch.delenv("CLIPO_SAVE_BY", raising=False)
    assert grpo_train_with_clipo(grpo, None, None, POLICY, _args(ckpt)) is None
    assert grpo.budget is None
