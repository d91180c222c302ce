# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner tests' shared fixtures (pieces in tests/runner/faults.py)."""

from __future__ import annotations

import pytest

from .faults import FakeRun, ModelBuilt


@pytest.fixture
def no_model(monkeypatch):
    """Building the run raises `ModelBuilt`: what happens before the model loads is all that runs."""

    def boom(*a, **k):
        raise ModelBuilt

    monkeypatch.setattr("clipo_megatron.runner.run.Run", boom)
    monkeypatch.setattr("clipo_megatron.runner.model.model_builder.build_gpt_model", boom)


@pytest.fixture
def fake_run(monkeypatch):
    """`train` runs its real loop, checkpoints and logs on a `FakeRun` (no model)."""
    FakeRun.built = []
    monkeypatch.setattr("clipo_megatron.runner.run.Run", FakeRun)
    return FakeRun
