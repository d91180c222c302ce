# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo.grader`: one key, the names of verify/pool.py's GRADERS, one error line otherwise."""

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
