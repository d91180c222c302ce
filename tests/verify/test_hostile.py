# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One hostile answer costs only itself: N correct answers beside it score N ones (issue 24, 3).

Before: the pool graded chunks of answers per worker and, past a batch deadline, killed the
pool and marked the whole unfinished chunk "killed" (47 correct + `\\boxed{9^{9^{9^9}}}`:
23 correct answers scored 0 after 365 s).
"""

import pytest

pytest.importorskip("math_verify")
pytestmark = pytest.mark.runner

from clipo_megatron.verify.graders import STATUSES, status_counts  # noqa: E402
from clipo_megatron.verify.pool import VerifierPool, verify_batch  # noqa: E402
from tests.verify import slow_graders  # noqa: E402

N = 7


@pytest.fixture(scope="module")
def pool():
    """Two workers; a worker deaf to its alarm is killed at 2 + 1 s."""
    with VerifierPool(2, timeout=2.0, slack=1.0, max_chars=0) as p:
        yield p


def _correct(n):
    return [f"so the answer is \\boxed{{{i + 2}}}" for i in range(n)], [
        str(i + 2) for i in range(n)
    ]


@pytest.mark.parametrize("where", [0, 3, N])  # first, in the middle, last
def test_a_worker_deaf_to_signals_costs_only_its_answer(pool, where):
    """The hard deadline: 'deaf' blocks the alarm; its worker is killed and replaced, the
    other N answers (several queued behind it on the same worker before) are graded."""
    responses, gts = _correct(N)
    responses.insert(where, "deaf")
    gts.insert(where, "1")
    v = pool.grade(responses, gts, grader=slow_graders.deaf)
    want = [1.0] * N
    want.insert(where, 0.0)
    assert [x.score for x in v] == want
    assert [x.status for x in v].count("timeout") == 1 and v[where].status == "timeout"
    assert status_counts(x.status for x in v)["ok"] == N
    assert pool.grade(["\\boxed{1}"] * 3, ["1"] * 3)[0].status == "ok"  # the replacement serves


def test_n_correct_beside_a_tower_of_powers(pool):
    """The issue's answer with the real grader. sympy and math-verify catch `Exception` around
    their steps; the alarm is not one, so it stops the answer and the worker carries on."""
    responses, gts = _correct(N)
    pool.grade(["\\boxed{1}"] * 2, ["1"] * 2)  # both workers up
    pids = pool.pids()
    scores = verify_batch(responses + ["\\boxed{9^{9^{9^9}}}"], gts + ["3"], pool=pool)
    assert list(scores) == [1.0] * N + [0.0]
    assert scores.statuses == ["ok"] * N + ["timeout"]
    (v,) = pool.grade(["\\boxed{9^{9^{9^9}}}"], ["3"])
    assert (v.status, v.detail) == ("timeout", "over 2 s (alarm)") and pool.pids() == pids


@pytest.mark.timeout(300)  # without the hard deadline: hours
def test_a_hog_holding_the_gil_costs_only_its_answer(pool):
    responses, gts = _correct(3)
    v = pool.grade(["hog"] + responses, ["1"] + gts, grader=slow_graders.hog)
    assert [(x.score, x.status) for x in v] == [(0.0, "timeout")] + [(1.0, "ok")] * 3


def test_a_crashing_answer_is_retried_once_then_killed(pool):
    responses, gts = _correct(3)
    v = pool.grade(
        responses[:1] + ["crash"] + responses[1:],
        gts[:1] + ["1"] + gts[1:],
        grader=slow_graders.crash,
    )
    assert [(x.score, x.status) for x in v] == [
        (1.0, "ok"),
        (0.0, "killed"),
        (1.0, "ok"),
        (1.0, "ok"),
    ]
    assert "twice" in v[1].detail


def test_length_cap_before_parsing():
    """An answer over max_chars is not sent to a worker (the grader would raise): "too_long"."""
    ok = "\\boxed{12}".ljust(50)  # 50 characters
    with VerifierPool(1, max_chars=50) as p:
        v = p.grade([ok, ok + "x"], ["12", "12"], grader=slow_graders.boom)
        assert [x.status for x in v] == ["error", "too_long"]
        assert v[1].score == 0.0 and "51 chars > max_chars=50" in v[1].detail
        assert [x.score for x in p.grade([ok, ok + "x"], ["12", "12"])] == [1.0, 0.0]
    with pytest.raises(ValueError, match="max_chars=-1"):
        VerifierPool(1, max_chars=-1)


def test_140k_unclosed_boxes_beside_correct_answers(pool):
    """The issue's other hostile answer: no closed box, so no answer (linear extraction, well
    within the deadline); over the default 100k-character cap it is not even parsed."""
    responses, gts = _correct(N)
    hostile = "\\boxed{" * 20_000  # 140k characters
    v = pool.grade(responses + [hostile], gts + ["3"])  # this pool has no cap
    assert [(x.score, x.status) for x in v] == [(1.0, "ok")] * N + [(0.0, "ok")]
    assert VerifierPool(1).grade([hostile], ["3"])[0].status == "too_long"  # no worker started


def test_status_counts():
    assert status_counts(["ok", "timeout", "ok", "too_long"]) == {
        "ok": 2, "timeout": 1, "killed": 0, "error": 0, "too_long": 1,
    }  # fmt: skip
    assert tuple(status_counts([])) == STATUSES
    with pytest.raises(ValueError, match="unknown verifier status"):
        status_counts(["error: boom"])


def test_grader_by_name(pool):
    """`grader=` travels to the workers by name ("module:function" or a GRADERS key)."""
    assert verify_batch(["\\boxed{2}"], ["2"], pool=pool, grader="math_verify") == [1.0]
    (v,) = pool.grade(["\\boxed{2}"], ["2"], grader="tests.verify.slow_graders:boom")
    assert v.status == "error"
    with pytest.raises(ValueError, match="unknown grader"):
        pool.grade(["a"], ["1"], grader="nope")


def test_start_waits_for_ready_workers():
    with VerifierPool(2) as p:
        p.start()
        assert len(p.pids()) == 2 and all(w.ready for w in p._procs)
        pids = p.pids()
        assert verify_batch(["\\boxed{2}"] * 3, ["2"] * 3, pool=p) == [1.0] * 3
        assert p.pids() == pids  # the batch used the started workers
