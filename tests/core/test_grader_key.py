# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo.grader`: one key, the names of verify/graders.py's GRADERS, one error line otherwise."""

from __future__ import annotations

import pytest

from clipo_megatron.core.config import ClipoBlock


def test_default_is_math_verify_and_paper_is_accepted():
    assert ClipoBlock().grader == "math_verify"
    assert ClipoBlock.from_dict({"grader": "paper"}).grader == "paper"


def test_unknown_grader_is_one_line():
    with pytest.raises(
        ValueError, match=r"clipo\.grader='mathverify' is not one of \['math_verify', 'paper'\]"
    ):
        ClipoBlock.from_dict({"grader": "mathverify"})


def test_dynamic_sampling_override_follows_the_objective_unless_set():
    """clipo.dynamic_sampling: null keeps the objective's (DAPO: on); false is the authors' DAPO
    (clip-higher only); the rest of the objective is untouched."""
    dapo = ClipoBlock.from_dict({"objective": "dapo"}).policy_objective()
    assert dapo.dynamic_sampling is True
    theirs = ClipoBlock.from_dict({"objective": "dapo", "dynamic_sampling": False})
    obj = theirs.policy_objective()
    assert obj.dynamic_sampling is False
    assert (obj.eps_low, obj.eps_high, obj.kl_coef, obj.ratio_clip_c) == (0.2, 0.28, 0.0, 3.0)
    with pytest.raises(
        ValueError, match=r"clipo\.dynamic_sampling='no' must be true, false or null"
    ):
        ClipoBlock.from_dict({"dynamic_sampling": "no"})
