# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`Range` (core/bounds.py) and the method's bounds (core/config.py METHOD_RANGES): finite, sign,
range, one line naming the dotted key `clipo.method.<knob>`, never the class."""

from __future__ import annotations

import math

import pytest

from clipo_megatron.core.bounds import Range
from clipo_megatron.core.config import ClipoBlock, CLIPOConfig


@pytest.mark.parametrize(
    "rule, ok, bad",
    [
        (Range(0, 1), [0, 0.5, 1, 1.0], [-1e-12, 1 + 1e-12, math.nan, math.inf, True, "0.5", None]),
        (Range(0, 1, lo_open=True), [1e-300, 1], [0, 0.0, -0.0]),
        (Range(0, 10, hi_open=True), [0, 9.999], [10, 10.0]),
        (Range(2, 1024, integer=True), [2, 1024], [1, 1025, 2.0, True]),
        (Range(0, lo_open=True), [1e-9, 1e300], [0, -1, math.inf]),
    ],
)
def test_range_holds_exactly_its_interval(rule, ok, bad):
    assert all(rule.holds(v) for v in ok), ok
    assert not any(rule.holds(v) for v in bad), [v for v in bad if rule.holds(v)]


def test_range_error_names_key_value_range_and_note():
    with pytest.raises(ValueError) as e:
        Range(0, 1, lo_open=True, note="why").check("a.b", 5.0)
    assert str(e.value) == "a.b=5.0 must be a finite number in (0, 1] (why)"
    with pytest.raises(ValueError) as e:
        Range(1, integer=True).check("n", 0)
    assert str(e.value) == "n=0 must be an int >= 1"


@pytest.mark.parametrize(
    "knob, value, message",
    [
        ("temperature", 1e-45, "clipo.method.temperature=1e-45 must be a finite number in [0.001, 10]"),
        ("temperature", 0.0, "clipo.method.temperature=0.0 must be"),
        ("reward_lambda", 1e300, "clipo.method.reward_lambda=1e+300 must be a finite number in [0, 100]"),
        ("reward_lambda", math.nan, "clipo.method.reward_lambda=nan must be"),
        ("reward_constant", 1e300, "clipo.method.reward_constant=1e+300 must be a finite number in [-100, 100]"),
        ("reward_constant", -math.inf, "clipo.method.reward_constant=-inf must be"),
        ("reward_clip_min", -1e300, "clipo.method.reward_clip_min=-1e+300 must be"),
        ("head_lr", math.inf, "clipo.method.head_lr=inf must be a finite number in [0, 1]"),
        ("head_weight_decay", math.nan, "clipo.method.head_weight_decay=nan must be"),
        ("embed_dim", 0, "clipo.method.embed_dim=0 must be an int in [1, 65536]"),
        ("warmup_steps", -1, "clipo.method.warmup_steps=-1 must be an int >= 0"),
        ("seed", 2**40, "clipo.method.seed=1099511627776 must be an int in [0, 2147483647]"),
        ("max_group_size", 1, "clipo.method.max_group_size=1 must be an int >= 2"),
        ("fixed_head", 1, "clipo.method.fixed_head must be a bool"),
    ],
)  # fmt: skip
def test_method_knobs_are_bounded_and_named_by_their_key(knob, value, message):
    with pytest.raises(ValueError) as e:
        CLIPOConfig(**{knob: value})
    assert str(e.value).startswith(message), str(e.value)
    assert "CLIPOConfig" not in str(e.value)


def test_the_paper_settings_pass():
    CLIPOConfig()  # Track I / II defaults
    CLIPOConfig(temperature=0.02, embed_dim=2048, reward_lambda=None, loss_type="softnn")
    CLIPOConfig(temperature=0.2, reward_lambda=0.2, reward_constant=0.0, head_lr=1e-3)


def test_rollouts_per_prompt_are_bounded_for_both_drivers():
    """`check_run` (both drivers) bounds G: the head's [G, G] terms grow as G^2."""
    keys = {"n": "grpo.num_generations_per_prompt", "steps": "s", "leave_one_out": "l"}
    with pytest.raises(ValueError, match=r"^grpo.num_generations_per_prompt=20000 must be an int"):
        ClipoBlock().check_run(n=20000, steps=10, leave_one_out=False, keys=keys)
    with pytest.raises(ValueError, match=r"^s=0 must be an int >= 1"):
        ClipoBlock().check_run(n=16, steps=0, leave_one_out=False, keys=keys)
    ClipoBlock().check_run(n=1024, steps=10, leave_one_out=False, keys=keys)


def test_an_int_too_large_for_a_float_is_out_of_range_not_an_overflow():
    """A 400-digit integer in a recipe was an OverflowError traceback (math.isfinite)."""
    from clipo_megatron.core.bounds import Range

    r = Range(1, 1024, integer=True)
    assert not r.holds(10**400) and r.holds(7)
    with pytest.raises(ValueError, match="must be"):
        r.check("policy.megatron_cfg.tensor_model_parallel_size", 10**400)
