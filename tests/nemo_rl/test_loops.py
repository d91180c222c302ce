# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The loop NeMo-RL's run_grpo.py (and run_grpo_single_controller.py) would run a recipe with,
and CLIPO's one-line refusal of every loop but grpo_train."""

from __future__ import annotations

import pytest

from clipo_megatron.nemo_rl.loops import loop_of, unsupported_loop_problem


def _cfg(async_on=None, data_plane=None, async_rl=None):
    cfg: dict = {
        "grpo": {"async_grpo": {"enabled": async_on}},
        "data_plane": {"enabled": data_plane},
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
        (_cfg(async_on=True), "async_grpo_train", "grpo.async_grpo.enabled"),
        (_cfg(data_plane=True), "grpo_train_sync", "data_plane.enabled"),
        # run_grpo.py checks async first: an async recipe over the data plane runs the async loop
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
    picked = loop_of(cfg)
    assert picked.name.split(" ")[0] == loop and picked.key == key
    problem = unsupported_loop_problem(cfg)
    if key is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(key) and "\n" not in problem
        assert "grpo_train only" in problem
