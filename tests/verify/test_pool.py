# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The process pool: order kept, kinds mixed, timeouts that fire, a stuck worker killed."""

import threading
import time

import pytest

pytest.importorskip("math_verify")
pytestmark = pytest.mark.runner

from clipo_megatron.verify.graders import Verdict  # noqa: E402
from clipo_megatron.verify.pool import VerifierPool, verify_batch  # noqa: E402
from tests.verify import slow_graders  # noqa: E402


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(2, timeout=5.0) as p:
        yield p


def test_batch_in_order_with_mixed_kinds(pool):
    responses = ["\\boxed{18}", "\\boxed{(B)}", "no box", "\\boxed{0.5}", "\\boxed{C}"] * 7
    gts = ["18", "B", "3", "\\frac{1}{2}", "D"] * 7
    kinds = ["math", "mc", "math", "math", "mc"] * 7
    assert verify_batch(responses, gts, kinds, pool=pool) == [1.0, 1.0, 0.0, 1.0, 0.0] * 7


def test_callable_from_a_thread(pool):
    """The reason for processes: a trainer's thread can grade (math-verify alone would raise)."""
    out = []
    t = threading.Thread(target=lambda: out.extend(verify_batch(["\\boxed{2}"], ["2"], pool=pool)))
    t.start()
    t.join()
    assert out == [1.0]


def test_bad_arguments_are_value_errors(pool):
    with pytest.raises(ValueError, match="2 responses, 1 ground truths"):
        pool.grade(["a", "b"], ["1"])
    with pytest.raises(ValueError, match="unknown answer kind"):
        pool.grade(["a"], ["1"], "code")
    assert pool.grade([], []) == []


def test_timeout_interrupts_a_slow_answer_and_the_worker_carries_on():
    with VerifierPool(1, timeout=0.5, grader=slow_graders.sleepy) as p:
        p.grade(["\\boxed{1}"], ["1"])  # start-up out of the timing
        t = time.perf_counter()
        v = p.grade(["\\boxed{1}", "sleep", "\\boxed{2}"], ["1", "1", "2"])
        assert [(x.score, x.status) for x in v] == [(1.0, "ok"), (0.0, "timeout"), (1.0, "ok")]
        elapsed = time.perf_counter() - t
        assert elapsed < 45.0  # interrupted, not the 60 s sleep (wide margin: loaded CI boxes)


def test_a_worker_deaf_to_signals_is_killed_and_the_pool_recovers():
    with VerifierPool(1, timeout=0.3, grader=slow_graders.deaf, slack=1.0) as p:
        t = time.perf_counter()
        v = p.grade(["deaf"], ["1"])
        elapsed = time.perf_counter() - t
        assert [(x.score, x.status) for x in v] == [(0.0, "timeout")]
        assert elapsed < 45.0  # killed, not left to sleep 60 s
        assert p.grade(["\\boxed{1}"], ["1"]) == [Verdict(1.0, "ok")]  # a fresh worker


def test_grader_errors_are_wrong_answers_not_crashes():
    with VerifierPool(1, grader=slow_graders.boom) as p:
        (v,) = p.grade(["\\boxed{1}"], ["1"])
        assert (v.score, v.status) == (0.0, "error")
        assert v.detail.startswith("RuntimeError: grader bug")
