# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A model CLIPO cannot capture stops the run at `clipo_setup`, before the first rollout, in one
line on the driver: the worker's `FinalNormNotFound` crosses Ray as a `RayTaskError` whose text
is the remote traceback; the policy re-raises the worker's line and the driver's command prints
it and exits 2. (NeMo-RL's own worker raising it: tests/nemo_rl/real_worker/test_real_worker.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from clipo_megatron.megatron.pooling.final_norm import FinalNormNotFound
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.guard import preflight as pf
from clipo_megatron.nemo_rl.policy import worker_refusal

ROOT = Path(__file__).resolve().parents[2]
LINE = "CLIPO cannot capture the final hidden states of Qwen3VLModel on the last pipeline stage"


@pytest.mark.nemo_rl  # leg 4 has ray (the contract environment); leg 1 does not
def test_rays_task_error_becomes_the_workers_one_line():
    exceptions = pytest.importorskip("ray.exceptions", reason="ray is not installed here")
    remote = exceptions.RayTaskError(
        "clipo_setup",
        'Traceback (most recent call last):\n  File "worker.py", line 235\n' + LINE,
        FinalNormNotFound(LINE),
    ).as_instanceof_cause()
    assert len(str(remote).splitlines()) > 1  # what the driver would print without the catch
    refusal = worker_refusal(remote)
    assert isinstance(refusal, FinalNormNotFound) and str(refusal) == LINE
    assert worker_refusal(exceptions.RayTaskError("f", "tb", ValueError("other"))) is None


def test_the_command_prints_the_refusal_and_exits_2(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location(
        "run_grpo_clipo", ROOT / "examples/run_grpo_clipo.py"
    )
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    report = pf.Report(config={"grpo": {}, "policy": {}}, clipo=ClipoNemoRLConfig.from_dict({}))
    monkeypatch.setattr(pf, "preflight", lambda *a, **k: report)
    monkeypatch.setattr("clipo_megatron.nemo_rl.deadline.check_before_start", lambda *a: None)

    def refused(config):
        raise FinalNormNotFound(LINE)

    monkeypatch.setattr("clipo_megatron.nemo_rl.driver.run", refused)
    assert cli.main(["--config", str(ROOT / "examples/configs/track1_qwen3b.yaml")]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [LINE] and out == ""
