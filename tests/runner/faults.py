# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Shared pieces of the fault-injection tests (tests/runner/test_faults_*.py): a run that
never builds a model, a `Run` stand-in that `train` drives through its real loop, and the
one-line refusal every user error must be."""

from __future__ import annotations

import json
import math

import pytest
import torch

from clipo_megatron.runner.run import STAGES

# What `train` is given in every fault test: no evaluation, no plots, a checkpoint per step.
QUIET = [
    "eval.size=0",
    "output.plots=false",
    "output.tensorboard=false",
    "output.checkpoint_every=1",
]


class ModelBuilt(Exception):
    """Raised where the run would build its model: a test sees whether that point was reached."""


class FakeRun:
    """What `train`'s loop asks of a `Run`, without a model: per step a metrics row holding the
    non-finite values real runs log (a NaN cosine on a step with no valid group, an inf), and a
    checkpointable state (a weight that counts the steps, the history, the config)."""

    built: list[FakeRun] = []

    def __init__(self, cfg):
        from clipo_megatron.runner.config import to_dict

        self.cfg, self.config = cfg, to_dict(cfg)
        self.step_idx, self.history, self.embeddings = 0, [], {}
        self.w = torch.zeros(2)
        self.loaded_lr: float | None = None
        FakeRun.built.append(self)

    def step(self) -> dict:
        m = {
            "step": self.step_idx,
            "reward/mean": 0.25 * self.step_idx,
            "clipo/pos_cos": math.nan,
            "test/inf": math.inf,
            "test/neg_inf": -math.inf,
            "rollout/token_hash": f"h{self.step_idx}",
            **{f"time/{s}": 0.0 for s in STAGES},
        }
        self.w += 1
        self.history.append(m)
        self.step_idx += 1
        return m

    def state_dict(self) -> dict:
        return {
            "step": self.step_idx,
            "policy": {"w": self.w.clone()},
            "history": self.history,
            "embeddings": {},
            "config": self.config,
        }

    def load_state_dict(self, state: dict) -> None:
        self.step_idx, self.history = state["step"], state["history"]
        self.w = state["policy"]["w"].clone()

    def close(self) -> None:
        pass


def refused(capsys, call, prefix: str = "clipo-megatron train: error: ") -> str:
    """The one stderr line of a command refused with exit status 2."""
    with pytest.raises(SystemExit) as e:
        call()
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def strict_rows(path) -> list[dict]:
    """metrics.jsonl read as strict JSON: a bare NaN / Infinity fails the test."""

    def no_constant(name):
        raise AssertionError(f"{path} holds a bare {name}: not JSON")

    return [json.loads(x, parse_constant=no_constant) for x in path.read_text().splitlines()]
