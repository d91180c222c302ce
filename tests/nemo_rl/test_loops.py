# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The loop NeMo-RL's run_grpo.py (and run_grpo_single_controller.py) would run a recipe with,
CLIPO's one-line refusal of the single-controller loop, of an async recipe NeMo-RL's async path
stops on and of a TransferQueue recipe grpo_train_sync stops on (or CLIPO cannot read)."""

from __future__ import annotations

import pytest

from clipo_megatron.nemo_rl.port.loops import (
    SUPPORTED,
    async_problems,
    loop_of,
    loop_problems,
    unsupported_loop_problem,
)


def _cfg(async_on=None, data_plane=None, async_rl=None):
    cfg: dict = {
        "grpo": {"async_grpo": {"enabled": async_on}},
        "data_plane": {"enabled": data_plane},
        "loss_fn": {"use_importance_sampling_correction": True},
    }
    if async_rl is not None:
        cfg["async_rl"] = async_rl
        cfg["grpo"]["async_grpo"] = None
    return cfg


@pytest.mark.parametrize(
    "cfg, loop, key",
    [
        (_cfg(), "grpo_train", None),
        (_cfg(async_on=False, data_plane=False), "grpo_train", None),
        (_cfg(async_on=True), "async_grpo_train", None),  # CLIPO's driver runs it
        (_cfg(data_plane=True), "grpo_train_sync", None),  # CLIPO's driver runs it
        # run_grpo.py checks async first: an async recipe over the data plane runs the async loop,
        # which CLIPO has not run over the data plane
        (_cfg(async_on=True, data_plane=True), "async_grpo_train", "grpo.async_grpo.enabled"),
        (
            _cfg(data_plane=True, async_rl={"sampler": {"name": "in_order"}}),
            "SingleControllerActor",
            "async_rl",
        ),
        ({}, "grpo_train", None),
    ],
)
def test_the_loop_nemo_rl_picks(cfg, loop, key):
    """key: the key the refusal names first (None: CLIPO's driver runs the recipe)."""
    picked = loop_of(cfg)
    assert picked.name.split(" ")[0] == loop
    problem = unsupported_loop_problem(cfg)
    assert loop_problems(cfg) == ([problem] if problem else [])
    if key is None:
        assert problem is None and picked in SUPPORTED
    else:
        assert problem is not None and problem.startswith(key) and "\n" not in problem


def test_the_driver_runs_nemo_rls_three_grpo_loops_only():
    assert [lp.name for lp in SUPPORTED] == ["grpo_train", "async_grpo_train", "grpo_train_sync"]
    for cfg in (_cfg(async_rl={"x": 1}), _cfg(async_rl={"x": 1}, data_plane=True)):
        line = unsupported_loop_problem(cfg)
        assert "grpo_train, async_grpo_train and grpo_train_sync only" in line


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("grpo.invalid_tool_call_advantage", -1.0, "NotImplementedError"),
        ("grpo.malformed_thinking_advantage", -0.5, "NotImplementedError"),
        ("grpo.reward_shaping.enabled", True, "unshaped_total_reward"),
    ],
)
def test_transferqueue_recipes_grpo_train_sync_stops_on_are_named_before_ray(key, value, why):
    """grpo_train_sync raises on message-level advantage penalties; with reward shaping it hands
    the estimator the shaped reward only, where CLIPO reads its positives from the raw one."""
    from omegaconf import OmegaConf

    from clipo_megatron.nemo_rl.port.master_config import as_conf

    cfg = as_conf(_cfg(data_plane=True))
    OmegaConf.update(cfg, key, value, force_add=True)
    cfg = OmegaConf.to_container(cfg)
    problems = loop_problems(cfg)
    assert len(problems) == 1 and problems[0].startswith("grpo.") and why in problems[0]
    assert "data_plane.enabled" in problems[0] and "\n" not in problems[0]
    assert unsupported_loop_problem(cfg) == problems[0]
    cfg["data_plane"]["enabled"] = False  # the same recipe with grpo_train: no such rule
    assert loop_problems(cfg) == []
    if key.startswith("grpo.reward_shaping"):  # CLIPO's rule: the baseline reads no positives
        cfg["data_plane"]["enabled"], cfg["clipo"] = True, {"enabled": False}
        assert loop_problems(cfg) == []


@pytest.mark.parametrize(
    "key, value",
    [
        ("grpo.use_dynamic_sampling", True),
        ("grpo.reward_scaling.enabled", True),
        ("grpo.reward_shaping.enabled", True),
        ("data.use_multiple_dataloader", True),
        ("loss_fn.use_importance_sampling_correction", False),
        ("loss_fn.use_importance_sampling_correction", None),  # unset: NeMo-RL's default, off
    ],
)
def test_async_recipes_nemo_rl_stops_on_are_named_before_ray(key, value):
    """run_grpo.py raises NotImplementedError on the first four with async on, async_grpo_train
    asserts the importance-sampling correction: one line each, naming the key."""
    from omegaconf import OmegaConf

    from clipo_megatron.nemo_rl.port.master_config import as_conf

    cfg = as_conf(_cfg(async_on=True))
    OmegaConf.update(cfg, key, value, force_add=True)
    cfg = OmegaConf.to_container(cfg)
    problems = loop_problems(cfg)
    assert len(problems) == 1 and problems[0].startswith(f"{key}=") and "\n" not in problems[0]
    assert "async" in problems[0]
    cfg["grpo"]["async_grpo"]["enabled"] = False  # the same recipe synchronously: no such rule
    assert loop_problems(cfg) == []


def test_every_async_problem_is_listed_at_once():
    cfg = _cfg(async_on=True, data_plane=True)
    cfg["grpo"]["use_dynamic_sampling"] = True
    cfg["loss_fn"]["use_importance_sampling_correction"] = False
    keys = [p.split("=")[0] for p in async_problems(cfg)]
    assert keys == [
        "grpo.async_grpo.enabled",
        "grpo.use_dynamic_sampling",
        "loss_fn.use_importance_sampling_correction",
    ]


def test_an_async_recipe_over_the_data_plane_says_why():
    """async_grpo_train over a TQPolicy: each loop ran with CLIPO, the pairing did not."""
    line = async_problems(_cfg(async_on=True, data_plane=True))[0]
    assert "TQPolicy" in line and "data_plane.enabled=false" in line
