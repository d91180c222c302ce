# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which NeMo-RL is installed: supported ones are recognised, others fail early naming the version."""

from __future__ import annotations

import enum
import os
import sys
import types

import pytest

from clipo_megatron.nemo_rl import compat


def _fake_nemo_rl(monkeypatch, version: str, metric_normalizer: bool) -> None:
    """A stand-in for NeMo-RL's version metadata only (what `detect` reads)."""
    root = types.ModuleType("nemo_rl")
    root.__version__ = version
    root.__spec__ = types.SimpleNamespace(name="nemo_rl", origin=None)
    interfaces = types.ModuleType("nemo_rl.algorithms.loss.interfaces")
    if metric_normalizer:
        interfaces.MetricNormalizer = enum.Enum("MetricNormalizer", "TOKENS")
    for name, mod in {
        "nemo_rl": root,
        "nemo_rl.algorithms": types.ModuleType("nemo_rl.algorithms"),
        "nemo_rl.algorithms.loss": types.ModuleType("nemo_rl.algorithms.loss"),
        "nemo_rl.algorithms.loss.interfaces": interfaces,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr("clipo_megatron.nemo_rl.require_nemo_rl", lambda: None)


@pytest.mark.parametrize(
    "version, normalizer, name",
    [("0.7.0", False, "v0.7.0"), ("0.6.0", True, "main@7ea279a")],
)
def test_supported_versions_are_recognised(monkeypatch, version, normalizer, name):
    _fake_nemo_rl(monkeypatch, version, normalizer)
    assert compat.check_supported().name == name


@pytest.mark.parametrize(
    "version, normalizer", [("0.6.0", False), ("0.8.0", True), ("0.5.0", False)]
)
def test_unsupported_version_fails_naming_it(monkeypatch, version, normalizer):
    _fake_nemo_rl(monkeypatch, version, normalizer)
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    with pytest.raises(compat.UnsupportedNemoRLError, match=rf"NeMo-RL {version} .*v0\.7\.0"):
        compat.check_supported()
    monkeypatch.setenv(compat.ALLOW_ENV, "1")  # the documented escape hatch warns instead
    with pytest.warns(UserWarning, match=version):
        assert not compat.check_supported().supported


@pytest.mark.nemo_rl
def test_real_nemo_rl_checkout_is_supported():
    if not os.environ.get("NEMO_RL_SRC"):
        pytest.skip(
            "NEMO_RL_SRC is not set: run `NEMO_RL_SRC=<checkout> bash scripts/test_nemo_rl.sh`"
        )
    flavour = compat.check_supported()
    print(f"\n[contract] NeMo-RL at {os.environ['NEMO_RL_SRC']}: {flavour}")
    assert flavour.name in compat.SUPPORTED
