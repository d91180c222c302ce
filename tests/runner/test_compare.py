# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron compare`: one-line user errors before any model load, the table it writes
from the runs' own results, and (slow) a real grid of tiny runs that a rerun skips."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.reporting.compare_report import (  # noqa: E402
    divergence_step,
    run_dir,
    write_report,
)
from clipo_megatron.runner.compare import main  # noqa: E402


def _error(capsys, argv) -> str:
    """The one stderr line of a refused command (exit status 2)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("clipo-megatron compare: error: ")
    return lines[0]


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--objectives", "grpo,ppo"], "'ppo' is not one of grpo, dapo, gspo, gmpo"),
        (["--objectives", "grpo,grpo"], "named twice"),
        (["--seeds", "0,x"], "--seeds 0,x: must be comma-separated non-negative integers"),
        (["--seeds", "1,-2"], "non-negative and distinct"),
        (["--seeds", "1,1"], "non-negative and distinct"),
        (["seed=3"], "compare sets seed for each run; use --seeds"),
        (["clipo.enabled=false"], "use the two arms"),
        (["output.dir=x"], "use --out"),
        (["train.foo=1"], "train.foo"),
        (["--config", "/nope.yaml"], "/nope.yaml"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_user_errors_are_one_line(tmp_path, capsys, argv, named):
    out = tmp_path / "out"
    assert named in _error(capsys, argv + ["--out", str(out)])
    assert not out.exists()  # nothing written for a refused command


def test_the_cli_routes_compare_here(tmp_path, capsys):
    from clipo_megatron.cli import _module_for
    from clipo_megatron.cli import main as cli_main

    assert _module_for(["compare"]) == "clipo_megatron.runner.compare"
    with pytest.raises(SystemExit) as e:
        cli_main(["compare", "--seeds", "", "--out", str(tmp_path / "o")])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("clipo-megatron compare: error: --seeds")


def test_unwritable_out_is_refused(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("")
    line = _error(capsys, ["--out", str(f / "cmp")])
    assert f"--out={f / 'cmp'}" in line and "is a file" in line


def test_a_run_made_with_another_config_is_refused(tmp_path, capsys):
    from clipo_megatron.output_folder import claim_output_folder
    from clipo_megatron.runner.config import load_config, to_dict

    claim_output_folder(tmp_path, kind="compare", key="--out")  # as compare marks its --out
    d = claim_output_folder(run_dir(tmp_path, "grpo", "clipo", 0), kind="train", key="output.dir")
    old = load_config(None, ["train.steps=2", "seed=0", f"output.dir={d}"])
    (d / "config.json").write_text(json.dumps(to_dict(old)))
    line = _error(capsys, ["--objectives", "grpo", "--out", str(tmp_path), "train.steps=3"])
    assert "train.steps: 2 then, 3 now" in line and "use another --out" in line


def _fake_run(out, obj, arm, seed, pass_after, reward_last):
    d = run_dir(out, obj, arm, seed)
    d.mkdir(parents=True)
    ev = {"n": 4, "problems": 8, "perturbed_problems": 8}
    res = {
        "train_reward_first_quarter": 0.5,
        "train_reward_last_quarter": reward_last,
        "eval_before": {**ev, "pass@1": 0.6, "pass@1_perturbed": 0.2},
        "eval_after": {**ev, "pass@1": pass_after, "pass@1_perturbed": 0.25},
        "mean_step_seconds": {"generate": 1.0, "train": 2.0},
    }
    (d / "results.json").write_text(json.dumps(res))
    hist = [{"step": s, "reward/mean": 0.5, "clipo/loss": 1.0} for s in range(2)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in hist))


def test_report_tables_and_verdicts_from_run_dirs(tmp_path):
    pytest.importorskip("matplotlib")
    for seed, (c, b) in enumerate([(0.75, 0.70), (0.80, 0.70)]):
        _fake_run(tmp_path, "grpo", "clipo", seed, c, 0.9)
        _fake_run(tmp_path, "grpo", "baseline", seed, b, 0.8)
    rep = write_report(tmp_path, ["grpo"], [0, 1], "t")
    md = (tmp_path / "compare.md").read_text()
    # clipo [0.75, 0.80]: mean 0.775, s = 0.0353553, half = 12.7062 * 0.025 = 0.3176550;
    # paired d = [0.05, 0.10]: mean 0.075, the same half -> [-0.243, +0.393], covers zero
    assert (
        "| held-out pass@1 after | 0.775 [0.457, 1.093] | 0.700 [0.700, 0.700] "
        "| +0.075 [-0.243, +0.393] |" in md
    )
    assert "| GRPO + CLIPO | GRPO | difference |" in md
    assert "- held-out pass@1 after: no measurable difference (CLIPO minus GRPO +0.075" in md
    # train reward 0.9 vs 0.8 on both seeds: zero-width interval at +0.1, CLIPO better
    assert "train reward, last quarter of steps (final): CLIPO is better by 0.100" in md
    assert "| mean step time (s) | 3.0 [3.0, 3.0] | 3.0 [3.0, 3.0] | not compared |" in md
    d = rep["by_objective"]["grpo"]["differences"]["pass@1_after"]
    assert d["values"] == pytest.approx([0.05, 0.1], abs=1e-15)
    assert d["low"] == pytest.approx(0.075 - 0.317655, abs=1e-6)
    assert json.loads((tmp_path / "compare.json").read_text()) == json.loads(json.dumps(rep))
    for name in ("curves_clipo_vs_grpo.png", "paired_differences.png"):
        assert (tmp_path / name).stat().st_size > 1000, name


def test_one_seed_report_is_side_by_side_without_intervals(tmp_path):
    _fake_run(tmp_path, "grpo", "clipo", 0, 0.75, 0.9)
    _fake_run(tmp_path, "grpo", "baseline", 0, 0.70, 0.8)
    write_report(tmp_path, ["grpo"], [0], "t", plots=False)
    md = (tmp_path / "compare.md").read_text()
    assert "One seed (0): each number is a single run, with no interval" in md
    assert "| held-out pass@1 after | 0.750 | 0.700 | +0.050 |" in md
    assert "| perturbed pass@1 before | 0.200 | 0.200 | +0.000 |" in md
    assert "one seed gives no interval; CLIPO minus GRPO is +0.050" in md


def _hashes(out, obj, arm, seed, hashes):
    lines = [{"step": k, "reward/mean": 0.5, "rollout/token_hash": h} for k, h in enumerate(hashes)]
    (run_dir(out, obj, arm, seed) / "metrics.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines)
    )


def test_divergence_step_is_the_first_step_whose_tokens_differ(tmp_path):
    for seed, (c, b) in enumerate([("aabx", "aaby"), ("aaaa", "aaaa")]):
        _fake_run(tmp_path, "grpo", "clipo", seed, 0.75, 0.9)
        _fake_run(tmp_path, "grpo", "baseline", seed, 0.70, 0.8)
        _hashes(tmp_path, "grpo", "clipo", seed, list(c))
        _hashes(tmp_path, "grpo", "baseline", seed, list(b))
    rep = write_report(tmp_path, ["grpo"], [0, 1], "t", plots=False)
    # seed 0: hashes a a b x vs a a b y -> first differ at step 3; seed 1: equal on all 4 steps
    assert rep["by_objective"]["grpo"]["divergence_step"] == {
        "0": {"step": 3, "steps": 4},
        "1": {"step": None, "steps": 4},
    }
    md = (tmp_path / "compare.md").read_text()
    assert "seed 0: step 3; seed 1: never within 4 steps." in md
    # steps are matched by number (a resumed log), not by line; runs without hashes say so
    c = [{"step": 1, "rollout/token_hash": "x"}, {"step": 0, "rollout/token_hash": "a"}]
    b = [{"step": 0, "rollout/token_hash": "a"}, {"step": 1, "rollout/token_hash": "y"}]
    assert divergence_step(c, b) == {"step": 1, "steps": 2}
    assert divergence_step([{"step": 0}], [{"step": 0}]) == {"step": None, "steps": 0}
    _fake_run(tmp_path / "old", "grpo", "clipo", 0, 0.75, 0.9)
    _fake_run(tmp_path / "old", "grpo", "baseline", 0, 0.70, 0.8)
    write_report(tmp_path / "old", ["grpo"], [0], "t", plots=False)
    assert "seed 0: not recorded" in (tmp_path / "old" / "compare.md").read_text()


def test_the_clipo_arms_diagnostics_are_reported_per_seed(tmp_path):
    """compare.json / compare.md carry the CLIPO arm's update diagnostics: per seed the mean over
    its steps, over seeds the mean and t-interval; the baseline arm (no head) has none."""
    from clipo_megatron.reporting.compare_report import DIAGNOSTICS

    logged = {0: [(0.5, 0.02, 0.10, 1.0), (1.0, 0.04, 0.30, 0.5)], 1: [(0.0, 0.0, 0.0, 0.0)] * 2}
    for seed, steps in logged.items():
        _fake_run(tmp_path, "grpo", "clipo", seed, 0.75, 0.9)
        _fake_run(tmp_path, "grpo", "baseline", seed, 0.70, 0.8)
        d = run_dir(tmp_path, "grpo", "clipo", seed)
        hist = [{"step": i, **dict(zip(DIAGNOSTICS, v))} for i, v in enumerate(steps)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in hist))
    rep = write_report(tmp_path, ["grpo"], [0, 1], "t", plots=False)
    diag = rep["by_objective"]["grpo"]["clipo_diagnostics"]
    # seed 0: means over its two steps (0.75, 0.03, 0.20, 0.75); seed 1: all zero
    assert diag["clipo/adv_share"]["values"] == pytest.approx([0.20, 0.0])
    assert diag["clipo/valid_group_frac"]["values"] == pytest.approx([0.75, 0.0])
    assert diag["clipo/r_cl_spread"]["mean"] == pytest.approx(0.015)
    assert diag["clipo/ranked_frac"]["values"] == pytest.approx([0.75, 0.0])
    md = (tmp_path / "compare.md").read_text()
    # [0.2, 0.0]: mean 0.1, s = 0.1414214, half = 12.7062 * 0.1 = 1.2706 -> [-1.171, 1.371]
    assert (
        "| CLIPO's share of the advantage, mean \\|A(r') - A(r)\\| / mean \\|A(r)\\| | 0.200 | 0.000 "
        "| 0.100 [-1.171, 1.371] |"
    ) in md
    # runs without diagnostics (older runs, or the baseline) give no table
    _fake_run(tmp_path / "old", "grpo", "clipo", 0, 0.75, 0.9)
    _fake_run(tmp_path / "old", "grpo", "baseline", 0, 0.70, 0.8)
    old = write_report(tmp_path / "old", ["grpo"], [0], "t", plots=False)
    assert old["by_objective"]["grpo"]["clipo_diagnostics"] == {}
    assert "What CLIPO did" not in (tmp_path / "old" / "compare.md").read_text()


TINY = [
    "model.source=tiny",
    "rollout.backend=hf",
    "rollout.prompts_per_step=2",
    "rollout.n=4",
    "rollout.max_tokens=6",
    "train.steps=1",
    "train.micro_batch=8",
    "eval.size=2",
    "eval.n=2",
    "eval.max_tokens=6",
    "clipo.method.embed_dim=8",
    "threads=1",
]


@pytest.mark.slow
@pytest.mark.mcore
@pytest.mark.runner
def test_tiny_grid_runs_then_a_rerun_skips_every_finished_run(
    tmp_path, capsys, mcore_single_process
):
    pytest.importorskip("megatron.core")
    pytest.importorskip("math_verify")
    pytest.importorskip("reasoning_gym")
    from clipo_megatron.models.smollm2 import smollm2_gguf_path

    try:
        smollm2_gguf_path()  # the tiny model's tokenizer
    except FileNotFoundError as e:
        pytest.skip(str(e))
    argv = ["--objectives", "grpo,dapo", "--seeds", "0,1", "--out", str(tmp_path), *TINY]
    assert main(argv) == 0
    first = capsys.readouterr().out
    grid = [(o, a, s) for o in ("grpo", "dapo") for a in ("clipo", "baseline") for s in (0, 1)]
    runs = [run_dir(tmp_path, *cell) for cell in grid]
    for d in runs:
        res = json.loads((d / "results.json").read_text())
        cfg = json.loads((d / "config.json").read_text())
        assert res["steps"] == 1 and cfg["clipo"]["enabled"] == (d.parent.name == "clipo")
        assert {"pass@1", "pass@1_perturbed"} <= set(res["eval_after"])
        assert res["eval_before"]["perturbed_problems"] == 2
    # the base policy's scores are measured once per seed and shared by all of its runs
    for s in (0, 1):
        befores = [(d / "eval_before.json").read_text() for d in runs if d.name == f"seed{s}"]
        assert len(set(befores)) == 1
    assert first.count("[compare] (") == 8 and "skipped" not in first
    md = (tmp_path / "compare.md").read_text()
    assert "## GRPO + CLIPO beside GRPO" in md and "## DAPO + CLIPO beside DAPO" in md
    assert md.count("| perturbed pass@1 after |") == 2
    # step 0 samples the same base policy with the same seed in both arms: the same tokens
    assert md.count("seed 0: never within 1 steps; seed 1: never within 1 steps.") == 2
    rep = json.loads((tmp_path / "compare.json").read_text())
    assert rep["by_objective"]["dapo"]["cells"]["clipo"]["pass@1_after"]["n"] == 2
    for name in ("curves_clipo_vs_grpo.png", "curves_clipo_vs_dapo.png", "paired_differences.png"):
        assert (tmp_path / name).exists(), name

    stamps = {d: (d / "results.json").stat().st_mtime_ns for d in runs}
    assert main(argv) == 0  # the same command again: nothing left to train
    second = capsys.readouterr().out
    assert second.count("finished earlier") == 8 and " -> " not in second
    assert {d: (d / "results.json").stat().st_mtime_ns for d in runs} == stamps
    assert (tmp_path / "compare.md").read_text() == md


def test_step_time_is_reported_per_arm_never_differenced(tmp_path):
    """The arms run one after another on a box whose load moves: a step-time gap is not CLIPO's
    cost (issue 24: compare.md reported +2.0 s that came from the box)."""
    from clipo_megatron.reporting.compare_report import STEP_TIME_NOTE

    _fake_run(tmp_path, "grpo", "clipo", 0, 0.75, 0.9)
    _fake_run(tmp_path, "grpo", "baseline", 0, 0.70, 0.8)
    res = run_dir(tmp_path, "grpo", "clipo", 0) / "results.json"
    r = json.loads(res.read_text())
    r["mean_step_seconds"] = {"generate": 20.0, "train": 13.1}  # 33.1 s vs the baseline's 3.0
    res.write_text(json.dumps(r))
    rep = write_report(tmp_path, ["grpo"], [0], "t", plots=False)
    md = (tmp_path / "compare.md").read_text()
    assert "| mean step time (s) | 33.1 | 3.0 | not compared |" in md
    assert STEP_TIME_NOTE in md and "+30.1" not in md
    assert "step_seconds" not in rep["by_objective"]["grpo"]["differences"]
    assert rep["by_objective"]["grpo"]["cells"]["clipo"]["step_seconds"]["mean"] == 33.1


def test_degenerate_steps_of_both_arms_are_named(tmp_path):
    """Step 7 of the main job: every rollout of both arms wrong (reward 0): compare.md says it
    was a step without signal, per seed; a step degenerate in one arm only is not named."""
    rewards = {  # seed -> arm -> reward per step
        0: {"clipo": [0.19, 0.0, 0.5, 0.0], "baseline": [0.19, 0.06, 0.5, 0.0]},
        1: {"clipo": [1.0, 0.3, 0.5, 0.6], "baseline": [1.0, 0.2, 0.0, 0.6]},
    }
    for seed, arms in rewards.items():
        for arm, rs in arms.items():
            _fake_run(tmp_path, "grpo", arm, seed, 0.7, 0.8)
            hist = [{"step": k, "reward/mean": r} for k, r in enumerate(rs)]
            (run_dir(tmp_path, "grpo", arm, seed) / "metrics.jsonl").write_text(
                "".join(json.dumps(h) + "\n" for h in hist)
            )
    rep = write_report(tmp_path, ["grpo"], [0, 1], "t", plots=False)
    assert rep["by_objective"]["grpo"]["degenerate_steps"] == {"0": [3], "1": [0]}
    md = (tmp_path / "compare.md").read_text()
    assert (
        "Degenerate steps (every rollout of both arms wrong, or every one right: no group had a "
        "learning signal; the task's draw, not an arm): seed 0: step 3; seed 1: step 0." in md
    )
    for seed in (0, 1):  # none anywhere: no line
        _fake_run(tmp_path / "ok", "grpo", "clipo", seed, 0.7, 0.8)
        _fake_run(tmp_path / "ok", "grpo", "baseline", seed, 0.7, 0.8)
    write_report(tmp_path / "ok", ["grpo"], [0, 1], "t", plots=False)
    assert "Degenerate steps" not in (tmp_path / "ok" / "compare.md").read_text()
