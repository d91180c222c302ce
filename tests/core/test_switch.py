# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The switch's rules on `ClipoBlock` (both drivers ask them): whether the head runs, when the
policy updates, what is correct, the cross-field checks; and why leave-one-out is refused."""

from __future__ import annotations

import pytest
import torch

from clipo_megatron.core.advantages import group_advantages
from clipo_megatron.core.config import ClipoBlock, CLIPOConfig

KEYS = {"n": "rollout.n", "steps": "train.steps", "leave_one_out": "adv.loo"}


def _block(enabled=True, **method):
    return ClipoBlock(enabled=enabled, method=CLIPOConfig(**method))


def test_off_is_the_plain_baseline():
    assert _block().head_runs and not _block(enabled=False).head_runs


def test_warmup_holds_the_policy_only_with_clipo_on():
    assert [_block(warmup_steps=3).policy_updates_at(s) for s in range(5)] == [
        False, False, False, True, True,
    ]  # fmt: skip
    assert all(_block(False, warmup_steps=3).policy_updates_at(s) for s in range(5))


def test_correct_is_the_threshold():
    r = torch.tensor([0.0, 0.49, 0.5, 1.0])
    assert _block().is_correct(r).tolist() == [False, False, True, True]
    low = ClipoBlock(correct_reward_threshold=0.2)
    assert low.is_correct(r).tolist() == [False, True, True, True]
    with pytest.raises(ValueError, match=r"^clipo.correct_reward_threshold=nan must be a finite"):
        ClipoBlock(correct_reward_threshold=float("nan"))
    with pytest.raises(ValueError, match=r"\[B\]"):
        _block().is_correct(torch.zeros(2, 2))


@pytest.mark.parametrize(
    "kw,method,match",
    [
        (dict(n=2), {}, r"^rollout.n=2: a CLIPO group needs .* set rollout.n >= 3"),
        (dict(steps=3), dict(warmup_steps=3), r"^clipo.method.warmup_steps=3 >= train.steps=3"),
        (dict(leave_one_out=True), {}, r"^adv.loo=true with CLIPO: .* set it to false"),
        (dict(n=8), dict(max_group_size=4), r"^clipo.method.max_group_size=4 < rollout.n=8"),
    ],
)
def test_cross_field_rules(kw, method, match):
    args = {"n": 4, "steps": 10, "leave_one_out": False, **kw}
    with pytest.raises(ValueError, match=match) as e:
        _block(**method).check_run(**args, keys=KEYS)
    assert "\n" not in str(e.value)  # one line
    if "max_group_size" not in method:  # the baseline has no group rule, no warm-up, any baseline
        _block(False, **method).check_run(**args, keys=KEYS)


def test_valid_run_passes():
    _block(warmup_steps=2).check_run(n=3, steps=3, leave_one_out=False, keys=KEYS)
    _block().check_run(n=3, steps=None, leave_one_out=False, keys=KEYS)


def test_leave_one_out_explodes_on_continuous_shaped_rewards():
    """Issue 17 item 5, why leave-one-out is refused with CLIPO: three correct rollouts whose
    r' = r + r_CL differ by 1e-4 and one failed rollout. Its leave-one-out baseline is the
    peers' mean 1.0 and its std the peers' std 1e-4, so A = -1 / (1e-4 + 1e-6) = -9901;
    the group-mean estimator stays within (n - 1) / sqrt(n) = 1.5."""
    r = torch.tensor([1.0000, 1.0001, 0.9999, 0.0], dtype=torch.float64)
    g = torch.zeros(4, dtype=torch.long)
    loo = group_advantages(r, g, leave_one_out=True)
    assert float(loo[3]) == pytest.approx(-1.0 / (1e-4 + 1e-6), rel=1e-6)
    assert float(group_advantages(r, g).abs().max()) <= 1.5
    # closer peers, bigger |A|: 1e-6 apart gives ~5e5
    r6 = torch.tensor([1.0, 1.000001, 0.999999, 0.0], dtype=torch.float64)
    assert abs(float(group_advantages(r6, g, leave_one_out=True)[3])) > 4e5
    with pytest.raises(ValueError, match="with CLIPO"):
        _block().check_run(n=4, steps=None, leave_one_out=True, keys=KEYS)
