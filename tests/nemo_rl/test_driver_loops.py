# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The driver runs the loop NeMo-RL's run_grpo.py would (issue 42, item 1), with CLIPO's
estimator in it, without NeMo-RL: a module with grpo_train and async_grpo_train that build their
estimator by the module-level name, as NeMo-RL's do (grpo_train_sync: test_tq_loop.py). NeMo-RL's
real async_grpo_train with CLIPO: `test_contract_async.py`."""

from __future__ import annotations

import types

import pytest

from clipo_megatron.nemo_rl.advantage_estimator import ClipoAdvantageEstimator
from clipo_megatron.nemo_rl.driver import grpo_train_with_clipo
from clipo_megatron.nemo_rl.head_step import WorkersHeadStep
from clipo_megatron.nemo_rl.port.grpo_loop import GrpoTrainArgs
from clipo_megatron.nemo_rl.port.master_config import master_config_dict


class Base:
    def compute_advantage(self, prompt_ids, rewards, mask, **kwargs):
        return rewards


def fake_grpo() -> types.SimpleNamespace:
    calls: list = []
    mod = types.SimpleNamespace(calls=calls, _create_advantage_estimator=lambda cfg: Base())

    def grpo_train(policy, *args):
        calls.append(("grpo_train", args, {}, mod._create_advantage_estimator(args[-1])))

    def async_grpo_train(policy, *args, max_trajectory_age_steps=1):
        kw = {"max_trajectory_age_steps": max_trajectory_age_steps}
        calls.append(("async_grpo_train", args, kw, mod._create_advantage_estimator(args[-1])))

    mod.grpo_train, mod.async_grpo_train = grpo_train, async_grpo_train
    return mod


def _args(*, async_on: bool, data_plane: bool = False, age: int = 1) -> GrpoTrainArgs:
    master = {
        "grpo": {"async_grpo": {"enabled": async_on, "max_trajectory_age_steps": age}},
        "data_plane": {"enabled": data_plane},
        "loss_fn": {"use_importance_sampling_correction": True},
        "checkpointing": {"enabled": True},
    }
    return GrpoTrainArgs(*[f"arg{i}" for i in range(10)], master)


POLICY = types.SimpleNamespace(run_all_workers_single_data=lambda method, **kwargs: [])


@pytest.mark.parametrize(
    ("async_on", "age", "loop"),
    [(False, 1, "grpo_train"), (True, 1, "async_grpo_train"), (True, 3, "async_grpo_train")],
)
def test_the_driver_runs_the_loop_the_recipe_names_with_clipos_estimator(
    async_on, age, loop, monkeypatch
):
    monkeypatch.delenv("CLIPO_SAVE_BY", raising=False)
    grpo, args = fake_grpo(), _args(async_on=async_on, age=age)
    original = grpo._create_advantage_estimator
    assert grpo_train_with_clipo(grpo, None, None, POLICY, args) is None
    [(name, passed, kwargs, estimator)] = grpo.calls
    assert name == loop
    assert passed == tuple([f"arg{i}" for i in range(10)] + [args.master_config])  # all 11 after
    # the policy, in grpo_train's order; async: the recipe's age, as run_grpo.py passes it
    assert kwargs == ({"max_trajectory_age_steps": age} if async_on else {})
    assert isinstance(estimator, ClipoAdvantageEstimator) and isinstance(estimator.base, Base)
    # r_CL comes from the policy's workers, not through a method of the policy
    assert estimator.head_step == WorkersHeadStep(POLICY.run_all_workers_single_data)
    assert grpo._create_advantage_estimator is original  # the rebinding is undone


def test_a_loop_the_driver_does_not_run_is_refused_and_nothing_runs(monkeypatch):
    """async_grpo_train over the data plane (grpo_train_sync itself: test_tq_loop.py)."""
    monkeypatch.delenv("CLIPO_SAVE_BY", raising=False)
    grpo, args = fake_grpo(), _args(async_on=True, data_plane=True)
    with pytest.raises(ValueError, match="data_plane.enabled=true"):
        grpo_train_with_clipo(grpo, None, None, POLICY, args)
    assert grpo.calls == []  # never the synchronous loop in its place


def test_master_config_reads_pydantic_and_dict_configs():
    class Model:
        def model_dump(self):
            return {"grpo": {}}

    assert master_config_dict(Model()) == {"grpo": {}}
    assert master_config_dict({"grpo": {}}) == {"grpo": {}}


# ------------------------------------------- async_grpo_train's seam (checked for async recipes)

ASYNC_SRC = """
def _create_advantage_estimator(master_config):
    return None


def async_grpo_train(policy, policy_generation, dataloader, val_dataloader, tokenizer, loss_fn,
                     task_to_env, val_task_to_env, logger, checkpointer, grpo_save_state,
                     master_config, max_trajectory_age_steps=1, processor=None):
    adv_estimator = _create_advantage_estimator(master_config)
    prev = policy.get_logprobs(train_data)
    return adv_estimator.compute_advantage(prompt_ids=1, rewards=2, mask=3)
"""
ASYNC_MOVES = {
    "in place": (lambda s: s, None),
    "estimator imported inside": (
        lambda s: s.replace("    adv_estimator = _create_advantage_estimator(", "    from x import "
                            "_create_advantage_estimator as build_estimator\n    adv_estimator = "
                            "build_estimator("),
        "async_grpo_train calls build_estimator",
    ),
    "age dropped": (
        lambda s: s.replace("max_trajectory_age_steps=1, ", ""),
        "async_grpo_train(policy,",
    ),
    "advantages before prev_logprobs": (
        lambda s: s.replace("    prev = policy.get_logprobs(train_data)\n", "")
        + "    policy.get_logprobs(train_data)\n",
        "does not call policy.get_logprobs before compute_advantage",
    ),
}  # fmt: skip


@pytest.mark.parametrize("move", list(ASYNC_MOVES))
def test_async_grpo_trains_seam_is_one_line_when_it_moves(move, tmp_path):
    from clipo_megatron.nemo_rl.port.grpo_loop import ASYNC_SEAMS
    from clipo_megatron.source_match import Source, moved_seams

    edit, found = ASYNC_MOVES[move]
    (tmp_path / "algorithms").mkdir()
    (tmp_path / "algorithms" / "grpo.py").write_text(edit(ASYNC_SRC))
    moved = moved_seams(ASYNC_SEAMS, Source(tmp_path))
    if found is None:
        assert moved == []
    else:
        [(seam, _, where, line)] = moved
        assert seam.name == "async_grpo_train" and where.startswith("algorithms/grpo.py")
        assert found in line, line


def test_async_grpo_trains_seam_in_the_checkout():
    """NeMo-RL's own async_grpo_train (NEMO_RL_SRC; scripts/test_nemo_rl.sh sets it)."""
    import os
    from pathlib import Path

    from clipo_megatron.nemo_rl.port.grpo_loop import ASYNC_SEAMS
    from clipo_megatron.source_match import Source, moved_seams

    src = os.environ.get("NEMO_RL_SRC")
    if not src:
        pytest.skip("no NeMo-RL checkout: set NEMO_RL_SRC=<dir>")
    assert moved_seams(ASYNC_SEAMS, Source(Path(src) / "nemo_rl")) == []
