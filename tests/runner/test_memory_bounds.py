# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every accepted size fits the machine (issue 31, item 2): `eval.size=100000` was in range and
grew to 17.4 GB RSS until the OOM killer ended it (exit 137, no message). Now the held-out
evaluation is generated in bounded chunks, and a config whose estimate is over the machine's
memory is refused in one line naming the key and the estimate, before any model loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.runner import memory, train  # noqa: E402
from clipo_megatron.runner.config import load_config  # noqa: E402

from .faults import QUIET, refused  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MACHINE = 16 * memory.GiB  # the machine the refusals are stated for


@pytest.fixture
def machine_of_16_gib(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: MACHINE)


@pytest.mark.parametrize(
    "overrides, said",
    [
        (["eval.size=10000000"], "config: eval.size = 10000000 needs about 76.3 GiB of memory"),
        (
            ["data.train_size=100000", "rollout.prompts_per_step=4096", "rollout.n=64"],
            "config: rollout.prompts_per_step x rollout.n = 4096 x 64 needs about",
        ),
        (["data.train_size=100000000"], "config: data.train_size = 100000000 needs about 762.9"),
    ],
    ids=["eval.size", "rollouts", "train_size"],
)
def test_a_size_over_the_machine_is_refused_before_anything(
    overrides, said, tmp_path, capsys, no_model, machine_of_16_gib
):
    out = tmp_path / "run"
    line = refused(capsys, lambda: train.main([*QUIET, f"output.dir={out}", *overrides]))
    assert line.startswith(f"clipo-megatron train: error: {said}"), line
    assert "more than the 16.0 GiB this machine has; lower" in line
    assert not out.exists()


def test_the_default_recipe_fits_a_small_machine(monkeypatch):
    cfg = load_config(str(ROOT / "examples/configs/cpu_demo.yaml"), [])
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * memory.GiB)
    memory.check_memory(cfg)  # no error: 4.1 GiB estimated
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * memory.GiB)
    with pytest.raises(ValueError, match="more than the 2.0 GiB this machine has"):
        memory.check_memory(cfg)


class _Recorder:
    """A generator that answers every prompt correctly and records each call's batch."""

    def __init__(self):
        self.calls: list[tuple[int, int]] = []  # (sequences, seed)

    def generate(self, prompts, n, *, seed, **kw):
        self.calls.append((len(prompts) * n, seed))
        return SimpleNamespace(
            texts=[p[-1]["content"] for p in prompts for _ in range(n)],
            prompt_index=[i for i in range(len(prompts)) for _ in range(n)],
        )


def _evaluate(monkeypatch, size: int, n: int) -> tuple[dict, _Recorder]:
    from clipo_megatron.runner.evaluation import evaluate

    cfg = load_config(None, [f"eval.size={size}", f"eval.n={n}", "eval.perturbed_size=0"])
    truths: dict[str, str] = {}

    def grade(texts, gts, **kw):  # a response "is correct" when its prompt's answer is known
        return [1.0 if truths.get(t) == g else 0.0 for t, g in zip(texts, gts)]

    monkeypatch.setattr("clipo_megatron.verify.boxed.verify_batch", grade)
    from clipo_megatron.runner.problems import load_problems

    for p in load_problems(cfg.data, size, seed_offset=10_000):
        truths[p.messages[-1]["content"]] = p.ground_truth
    gen = _Recorder()
    return evaluate(SimpleNamespace(cfg=cfg, gen=gen)), gen


def test_a_large_evaluation_is_generated_in_bounded_chunks(monkeypatch):
    res, gen = _evaluate(monkeypatch, size=1000, n=4)
    assert res["problems"] == 1000 and res["pass@1"] == 1.0  # every row lines up with its problem
    assert max(s for s, _ in gen.calls) <= memory.EVAL_CHUNK_SEQUENCES  # 256, whatever eval.size
    assert sum(s for s, _ in gen.calls) == 4000 and len(gen.calls) == 16  # 1000 / (256 // 4)
    assert len({seed for _, seed in gen.calls}) == 16  # each chunk draws its own samples


def test_a_small_evaluation_is_one_call_with_the_seed_it_always_had(monkeypatch):
    _, gen = _evaluate(monkeypatch, size=32, n=4)
    cfg = load_config(None, [])
    assert gen.calls == [(128, cfg.seed + 7)]


def test_the_problem_estimate_bounds_what_is_measured():
    """The estimate's per-problem bytes are an upper bound of the RSS 20,000 generated problems
    add (ru_maxrss, reasoning-gym's import included)."""
    code = (
        "import resource, json\n"
        "from clipo_megatron.data.arithmetic import arithmetic_problems\n"
        "r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "ps = arithmetic_problems(20000, 0, dataset='basic_arithmetic', one_shot=True)\n"
        "r1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(json.dumps((r1 - r0) * 1024 / len(ps)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) <= memory.PROBLEM_BYTES
