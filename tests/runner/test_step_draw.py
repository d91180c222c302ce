# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A step's problems hold no prompt twice (the CPU task repeats questions: 242 distinct sums).

Before the fix, step 7 of the main job drew "Calculate 0 - 9." twice. The draw is checked over
many steps against a naive reference: the next problems in order, duplicates skipped.
"""

from __future__ import annotations

import pytest

from clipo_megatron.data.records import Record
from clipo_megatron.runner.problems import step_problems


def _task(size=1024, seed=0):
    from clipo_megatron.data.arithmetic import arithmetic_problems

    pytest.importorskip("reasoning_gym")
    return arithmetic_problems(size, seed)


def _naive(problems, step, p):
    """Walk the list from step * p, keep a prompt unless this step already has it."""
    out = []
    i = step * p
    while len(out) < p:
        r = problems[i % len(problems)]
        if all(r.prompt != o.prompt for o in out):
            out.append(r)
        i += 1
    return out


@pytest.mark.parametrize("p", [3, 8, 16])
def test_no_prompt_twice_in_any_step(p):
    problems = _task()
    assert len({r.prompt for r in problems}) < len(problems)  # the task does repeat questions
    steps = 2 * len(problems) // p + 5  # past the wrap, twice
    for step in range(steps):
        batch = step_problems(problems, step, p)
        assert len(batch) == p and len({r.prompt for r in batch}) == p, step
        assert batch == _naive(problems, step, p)


def test_main_jobs_step_7_draws_three_distinct_prompts():
    problems = _task()
    old = problems[21:24]  # what step 7 drew before: "0 - 9" twice
    assert [r.prompt.split("\n")[0] for r in old].count("Calculate 0 - 9.") == 2
    new = [r.prompt.split("\n")[0] for r in step_problems(problems, 7, 3)]
    # the repeat skipped: the next problem in order (problems[24], "3 + 2") takes its place
    assert new == ["Calculate 6 - 10.", "Calculate 0 - 9.", "Calculate 3 + 2."]
    assert problems[24].prompt.startswith("Calculate 3 + 2.")


def test_a_duplicate_free_list_keeps_the_old_order():
    rows = [Record(f"q{i}", str(i), "math", "t", i, "d") for i in range(10)]
    for step in range(12):
        start = (step * 4) % 10
        assert step_problems(rows, step, 4) == [rows[(start + i) % 10] for i in range(4)]


def test_fewer_distinct_prompts_than_a_step_needs_is_one_line():
    rows = [Record(f"q{i % 2}", "1", "math", "t", i, "d") for i in range(6)]
    with pytest.raises(ValueError) as e:
        step_problems(rows, 0, 3)
    assert str(e.value) == (
        "rollout.prompts_per_step=3 but the task has 2 distinct prompts: "
        "lower rollout.prompts_per_step or raise data.train_size"
    )


def test_the_runner_draws_through_it():
    """sample_rollouts' batch is step_problems' (off rank 0: no generation, the draw alone)."""
    from types import SimpleNamespace

    from clipo_megatron.runner.rollouts import sample_rollouts

    problems = _task()
    cfg = SimpleNamespace(prompts_per_step=3)
    batch, ro, rewards = sample_rollouts(None, problems, cfg, seed=0, step=7, t={})[:3]
    assert batch == step_problems(problems, 7, 3) and ro is None and rewards is None
