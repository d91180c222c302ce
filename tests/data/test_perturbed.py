# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The perturbed held-out set: right answers, the same problems for a seed, none of them a
training problem; the runner's evaluation reports it beside the in-distribution set."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from clipo_megatron.data.perturbed import (
    DATA_SOURCE,
    PERTURBATIONS,
    perturbation_of,
    perturbed_arithmetic,
)

EXPR = re.compile(r"Calculate ((?:\d+)(?: [+-] \d+)+)\.$")


def _question(record) -> str:
    return record.prompt.split("\n")[0]


def _naive_answer(question: str) -> int:
    """Left to right over the signed terms, written here without the generator's code."""
    m = EXPR.search(question)
    assert m, question
    tokens = m.group(1).split()
    total = int(tokens[0])
    for op, t in zip(tokens[1::2], tokens[2::2]):
        total = total + int(t) if op == "+" else total - int(t)
    return total


def test_hand_computed_answers_at_seed_0():
    recs = perturbed_arithmetic(4, 0)
    got = [(_question(r), r.ground_truth) for r in recs]
    assert got == [
        ("Calculate 8 + 7 - 4.", "11"),  # 8 + 7 = 15, 15 - 4 = 11
        ("Calculate 47 + 80.", "127"),  # 47 + 80 = 127
        # the platform number is a distractor: 4 - 5 = -1, -1 + 9 = 8
        ("Mia's train leaves from platform 62. Calculate 4 - 5 + 9.", "8"),
        ("Mia's train leaves from platform 90. Calculate 33 - 91.", "-58"),  # 33 - 91 = -58
    ]
    assert [perturbation_of(r) for r in recs] == list(PERTURBATIONS)
    assert all(r.prompt.endswith("within \\boxed{}.") and r.few_shot for r in recs)
    assert {r.data_source for r in recs} == {DATA_SOURCE}


def test_every_answer_matches_a_naive_evaluation_and_each_kind_has_its_shape():
    for r in perturbed_arithmetic(200, 3):
        q, kind = _question(r), perturbation_of(r)
        assert int(r.ground_truth) == _naive_answer(q), q
        terms = [int(t) for t in EXPR.search(q).group(1).split()[::2]]  # type: ignore[union-attr]
        if kind.startswith("terms"):
            assert len(terms) == 3 and all(0 <= t <= 9 for t in terms), q
        else:
            assert len(terms) == 2 and all(11 <= t <= 99 for t in terms), q
        assert q.startswith("Calculate") != kind.endswith("+distractor"), q


def test_deterministic_per_seed_and_different_across_seeds():
    a, b = perturbed_arithmetic(50, 7), perturbed_arithmetic(50, 7)
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    c = perturbed_arithmetic(50, 8)
    assert [r.prompt for r in a] != [r.prompt for r in c]
    assert perturbed_arithmetic(10, 7)[:10] == a[:10]  # a prefix does not depend on the size


def test_disjoint_from_the_training_problems():
    pytest.importorskip("reasoning_gym")
    from clipo_megatron.data.arithmetic import arithmetic_problems

    train = arithmetic_problems(1024, 0)  # the demo's training set (data.seed 0)
    train_exprs = {EXPR.search(_question(r)).group(1) for r in train}  # type: ignore[union-attr]
    # "a + b": two terms in 0..10 (reasoning-gym's single digits reach 10)
    assert all(len(e.split()) == 3 and max(map(int, e.split()[::2])) <= 10 for e in train_exprs)
    perturbed = perturbed_arithmetic(400, 20_000)
    assert not {r.prompt for r in perturbed} & {r.prompt for r in train}
    assert not {EXPR.search(_question(r)).group(1) for r in perturbed} & train_exprs  # type: ignore[union-attr]


def test_bad_size_is_refused():
    with pytest.raises(ValueError, match="size=0 must be >= 1"):
        perturbed_arithmetic(0, 0)


class _DistractedGenerator:
    """Sample 0 solves the arithmetic but adds any number a distracting sentence mentions;
    sample 1 always answers 1000 (wrong)."""

    def __init__(self):
        self.calls = []

    def generate(self, messages, n, *, sampling, max_tokens, seed):
        self.calls.append({"prompts": len(messages), "max_tokens": max_tokens, "seed": seed})
        texts, index = [], []
        for i, msgs in enumerate(messages):
            q = msgs[-1]["content"].split("\n")[0]
            noise = sum(int(x) for x in re.findall(r"\d+", q.split("Calculate")[0]))
            texts += [f"\\boxed{{{_naive_answer(q) + noise}}}", "\\boxed{1000}"][:n]
            index += [i] * n
        return SimpleNamespace(texts=texts, prompt_index=index)


def test_evaluation_reports_both_sets_separately():
    pytest.importorskip("math_verify")
    pytest.importorskip("reasoning_gym")
    from clipo_megatron.runner.config import load_config
    from clipo_megatron.runner.evaluation import PERTURBED_EXTRA_TOKENS, evaluate

    cfg = load_config(None, ["eval.size=6", "eval.n=2", "eval.max_tokens=20"])
    assert cfg.perturbed_eval_size() == 6  # default: eval.size
    gen = _DistractedGenerator()
    res = evaluate(SimpleNamespace(cfg=cfg, gen=gen))
    # in-distribution: sample 0 right on all 6, sample 1 wrong: 6 / 12
    assert res["pass@1"] == 0.5 and res["problems"] == 6
    # perturbed (kinds cycle terms, digits, +distractor, +distractor, terms, digits):
    # sample 0 right on the 4 without a distractor, wrong on the 2 with one: 4 / 12
    assert res["pass@1_perturbed"] == pytest.approx(4 / 12, abs=1e-15)
    assert res["pass@1_perturbed_by_kind"] == {
        "terms": 0.5,
        "digits": 0.5,
        "terms+distractor": 0.0,
        "digits+distractor": 0.0,
    }
    assert res["perturbed_problems"] == 6
    assert [c["max_tokens"] for c in gen.calls] == [20, 20 + PERTURBED_EXTRA_TOKENS]

    off = load_config(None, ["eval.size=2", "eval.n=2", "eval.perturbed_size=0"])
    res = evaluate(SimpleNamespace(cfg=off, gen=_DistractedGenerator()))
    assert "pass@1_perturbed" not in res and res["pass@1"] == 0.5


def test_perturbed_size_config():
    pytest.importorskip("omegaconf")
    from clipo_megatron.runner.config import load_config

    assert load_config(None, ["eval.perturbed_size=5"]).perturbed_eval_size() == 5
    assert load_config(None, ["eval.size=0"]).perturbed_eval_size() == 0
    with pytest.raises(ValueError, match=r"eval.perturbed_size=-1 must be an int in \[0, "):
        load_config(None, ["eval.perturbed_size=-1"])
    with pytest.raises(ValueError, match="eval.perturbed_size=4: the perturbed set perturbs"):
        load_config(None, ["eval.perturbed_size=4", "data.path=x.jsonl"])
