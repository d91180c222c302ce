# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo.grader` reaches the NeMo-RL driver's rewards: the `clipo_math` environment grades with it.

The environment is a Ray actor that sees only its `env.clipo_math` entry; the driver's
`prepare` writes `clipo.grader` there (`with_env_grader`), and the actor builds its verifier
pool with it. The CI-level tests run the environment's step (`grade_messages`) on answers the
two graders disagree on; the contract case runs NeMo-RL's real loop (scripts/test_nemo_rl.sh,
skipped without NEMO_RL_SRC and its venv).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.config import validate_master_config, with_env_grader
from clipo_megatron.nemo_rl.env_grading import EnvSettings, grade_messages
from clipo_megatron.nemo_rl.guard.recipes import load_recipe
from clipo_megatron.verify.pool import VerifierPool
from tests.nemo_rl.test_contract import contract_model, nemo_rl_cpu  # noqa: F401 (fixtures)

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "track1_qwen3b.yaml"
# (answer, gold, kind): math-verify accepts the first, the authors' checker the second
ROWS = [(r"\boxed{(B)}", "B", "mc"), (r"\boxed{2.0000001}", "2", "math"), (r"\boxed{B}", "B", "mc")]
VERDICTS = {"math_verify": [1.0, 0.0, 1.0], "paper": [0.0, 1.0, 1.0]}


def _env_step(cfg: dict) -> list[float]:
    """The environment's step as the actor runs it, on the env entry the driver writes."""
    s = EnvSettings.from_cfg(with_env_grader(cfg)["env"]["clipo_math"])
    logs = [
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": a}] for a, _, _ in ROWS
    ]
    meta = [{"ground_truth": g, "clipo_kind": k} for _, g, k in ROWS]
    with VerifierPool(1, timeout=s.timeout, grader=s.grader) as pool:
        rewards, _ = grade_messages(pool, logs, meta)
    return rewards.tolist()


@pytest.mark.runner
@pytest.mark.parametrize("grader", ["math_verify", "paper"])
def test_the_environment_grades_with_clipo_grader(grader):
    pytest.importorskip("math_verify")
    cfg = load_recipe(RECIPE, [f"clipo.grader={grader}"])
    assert validate_master_config(cfg).grader == grader
    assert _env_step(cfg) == VERDICTS[grader]


def test_the_grader_is_one_key():
    cfg = load_recipe(RECIPE, ["clipo.grader=paper"])
    assert with_env_grader(cfg)["env"]["clipo_math"]["grader"] == "paper"
    assert "grader" not in cfg["env"]["clipo_math"]  # a copy: the recipe dict is not changed
    clash = load_recipe(RECIPE, ["clipo.grader=paper", "+env.clipo_math.grader=math_verify"])
    with pytest.raises(ValueError, match="env.clipo_math.grader='math_verify' but clipo.grader"):
        with_env_grader(clash)
    with pytest.raises(ValueError, match="env.clipo_math.grader='x' is not one of"):
        EnvSettings.from_cfg({"grader": "x"})


def test_the_preflight_names_a_missing_pylatexenc(monkeypatch):
    """The paper grader's LaTeX step is pylatexenc's: an install without it fails the preflight
    in one line, not every answer with a backslash in the middle of a run."""
    import importlib.util

    from clipo_megatron.nemo_rl.guard import preflight as pf

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "pylatexenc" else find_spec(n, *a)
    )
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)
    problems = pf.preflight_config(load_recipe(RECIPE, ["clipo.grader=paper"]), cluster_env=False)
    assert [p for p in problems.problems if "pylatexenc" in p] == [
        "clipo.grader=paper needs pylatexenc (the authors' checker's LaTeX converter), which is "
        "not installed; pip install 'pylatexenc>=2.10,<3' (a dependency of this package)"
    ]
    ok = pf.preflight_config(load_recipe(RECIPE, ["clipo.grader=math_verify"]), cluster_env=False)
    assert not [p for p in ok.problems if "pylatexenc" in p]


@pytest.mark.nemo_rl
@pytest.mark.slow
def test_grpo_train_rewards_with_the_paper_grader(nemo_rl_cpu, contract_model, tmp_path):  # noqa: F811
    """NeMo-RL's real loop with `clipo.grader=paper`: NeMo-RL's MasterConfig takes the env entry,
    the actor grades every rollout through the paper grader, the advantage step gets 0 / 1."""
    from clipo_testkit.nemo_rl.nemo_rl_loop import one_step_config, run_grpo, train_metrics

    cfg = one_step_config(True, model_dir=contract_model, out_dir=tmp_path)
    cfg["clipo"]["grader"] = "paper"
    out = run_grpo(cfg, worker_fqn=nemo_rl_cpu)
    m = train_metrics(out, 1)
    assert m["verify/ok"] == 16.0 and m["verify/error"] == 0.0  # graded, none raised
    rewards = out["trace"][0]["rewards"]
    assert set(rewards.tolist()) <= {0.0, 1.0} and len(rewards) == 16
