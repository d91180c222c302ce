# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The baseline arm's step counter beside NeMo-RL's checkpoint (policy.RUN_STATE_FILE).

With CLIPO off nothing of the head is saved, and the counter that gives the verifier metrics their
step restarted at 0 on a resume: a resumed run logged step 3's `verify/*` at step 1 (NeMo-RL's
grpo_train over the real worker, baseline arm: step 3 had no `verify/ok`).
"""

from __future__ import annotations

import json

import pytest

from clipo_megatron.nemo_rl.advantage_estimator import ClipoRunState
from clipo_megatron.nemo_rl.policy import RUN_STATE_FILE, load_run_state, save_run_state


def test_the_step_counter_round_trips(tmp_path):
    state = ClipoRunState(step=2)
    save_run_state(str(tmp_path / "step_2"), state.state_dict())
    back = ClipoRunState()
    back.load_state_dict(load_run_state(str(tmp_path / "step_2")))
    assert back.step == 2
    assert sorted(p.name for p in (tmp_path / "step_2").iterdir()) == [RUN_STATE_FILE]


def test_a_checkpoint_without_it_restores_nothing(tmp_path):
    assert load_run_state(str(tmp_path)) is None


MALFORMED = [
    '{"format_version": 1, "step": -1}',
    '{"format_version": 1, "step": "2"}',
    '{"format_version": 1, "step": 2.5}',
    '{"format_version": 1}',
    "[",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_a_malformed_file_is_one_error_naming_it(tmp_path, text):
    (tmp_path / RUN_STATE_FILE).write_text(text)
    with pytest.raises(ValueError, match=rf"{RUN_STATE_FILE}: not a CLIPO run state"):
        load_run_state(str(tmp_path))


@pytest.mark.parametrize("saved", [{"step": 2}, {"format_version": 2, "step": 2}])
def test_a_file_of_another_format_version_is_one_error_naming_it(tmp_path, saved):
    (tmp_path / RUN_STATE_FILE).write_text(json.dumps(saved))
    what = "format version 2" if "format_version" in saved else "no format version"
    with pytest.raises(ValueError, match=rf"{RUN_STATE_FILE} has {what}; .* version 1 only"):
        load_run_state(str(tmp_path))


def test_a_resume_without_optimizer_state_is_said_in_one_line():
    from clipo_megatron.nemo_rl.policy import resume_without_optimizer

    assert resume_without_optimizer(None, None) is None  # a fresh run
    assert (
        resume_without_optimizer("ckpt/step_2/policy/weights", "ckpt/step_2/policy/optimizer")
        is None
    )
    line = resume_without_optimizer("ckpt/step_2/policy/weights", None)
    assert (
        line.count("\n") == 0 and "ckpt/step_2/policy/weights" in line and "Adam restarts" in line
    )
