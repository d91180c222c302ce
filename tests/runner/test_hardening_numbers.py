# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every numeric knob bounded before any model loads, in both drivers (issue 24 item 2).

Each value below used to pass validation and poison or crash the run after the model had
loaded (`reward_lambda=1e300`: 0 * inf = NaN on the non-anchor rows; `grad_clip=-1`:
gradient ascent; `rollout.temperature=-1`: silently greedy; `eval.n=0`, `tiny_layers=0`,
`threads=-1`: tracebacks). Now: one line naming the dotted key and the allowed range,
exit 2, the model builder never called, nothing written to output.dir.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.runner import heldout, train  # noqa: E402
from clipo_megatron.runner.config import load_config, to_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def built(monkeypatch) -> list:
    """Records every call of the run / model builders (each then raises)."""
    calls: list = []

    def record(*a, **k):
        calls.append(a)
        raise AssertionError("the model was built")

    monkeypatch.setattr("clipo_megatron.runner.run.Run", record)
    monkeypatch.setattr("clipo_megatron.runner.model.model_builder.build_gpt_model", record)
    monkeypatch.setattr("clipo_megatron.models.hf_policy.load_hf_policy", record)
    return calls


# (override, what the one line must hold: the dotted key, the value and the allowed range)
BAD = [
    ("clipo.method.reward_lambda=1e300", "clipo.method.reward_lambda=1e+300 must be a finite number in [0, 100]"),
    ("clipo.method.temperature=1e-45", "clipo.method.temperature=1e-45 must be a finite number in [0.001, 10]"),
    ("clipo.method.reward_constant=1e300", "clipo.method.reward_constant=1e+300 must be a finite number in [-100, 100]"),
    ("clipo.method.temperature=nan", "clipo.method.temperature=nan must be a finite number"),
    ("clipo.method.head_lr=inf", "clipo.method.head_lr=inf must be a finite number in [0, 1]"),
    ("clipo.method.reward_clip_min=1", "clipo.method.reward_clip_min=1.0 must be a finite number in [-100, 0]"),
    ("clipo.method.embed_dim=0", "clipo.method.embed_dim=0 must be an int in [1, 65536]"),
    ("train.grad_clip=-1", "train.grad_clip=-1.0 must be a finite number > 0"),
    ("train.lr=nan", "train.lr=nan must be a finite number in (0, 1]"),
    ("train.weight_decay=-0.1", "train.weight_decay=-0.1 must be a finite number in [0, 1]"),
    ("train.kl_coef=inf", "train.kl_coef=inf must be a finite number in [0, 100]"),
    ("train.max_nonfinite_skips=0", "train.max_nonfinite_skips=0 must be an int in [1, 1000]"),
    ("rollout.temperature=-1", "rollout.temperature=-1.0 must be a finite number in (0, 10]"),
    ("rollout.temperature=0", "rollout.temperature=0.0 must be a finite number in (0, 10]"),
    ("rollout.top_p=0", "rollout.top_p=0.0 must be a finite number in (0, 1]"),
    ("eval.top_p=5", "eval.top_p=5.0 must be a finite number in (0, 1]"),
    ("eval.temperature=-0.5", "eval.temperature=-0.5 must be a finite number in [0, 10]"),
    ("eval.n=0", "eval.n=0 must be an int in [1, 1024]"),
    ("model.tiny_layers=0", "model.tiny_layers=0 must be an int in [1, 256]"),
    ("model.tiny_hidden=12", "model.tiny_hidden=12 must be a multiple of 8"),
    ("threads=-1", "threads=-1 must be an int in [0, 4096]"),
    ("rollout.n=20000", "rollout.n=20000 must be an int in [2, 1024]"),
    ("rollout.max_tokens=0", "rollout.max_tokens=0 must be an int in [1, 131072]"),
    ("seed=-1", "seed=-1 must be an int in [0, 2147483647]"),
]  # fmt: skip


def _one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("override, named", BAD, ids=[b[0] for b in BAD])
def test_train_refuses_the_value_before_the_model_loads(tmp_path, capsys, built, override, named):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train.main([override, f"output.dir={out}"])
    assert e.value.code == 2
    line = _one_line(capsys)
    assert line.startswith("clipo-megatron train: error: ") and named in line, line
    assert built == [] and not out.exists()  # nothing built, nothing written


@pytest.mark.parametrize("override, named", BAD[:3] + [BAD[-8]], ids=lambda x: x.split("=")[0])
def test_eval_run_refuses_the_value_before_the_model_loads(
    tmp_path, capsys, built, override, named
):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(to_dict(load_config(None, []))))
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(SystemExit) as e:
        heldout.main(["--run", str(run), override])
    assert e.value.code == 2
    assert named in _one_line(capsys)
    assert built == []
    assert {"eval.json", "eval.md"}.isdisjoint(p.name for p in run.iterdir()), before


def test_the_defaults_and_the_shipped_recipes_pass():
    load_config(None, [])
    for recipe in sorted((ROOT / "examples" / "configs").glob("cpu_demo*.yaml")):
        load_config(str(recipe), [])


# ---------------------------------------------------------------- the NeMo-RL driver's config


def _master() -> dict:
    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    return copy.deepcopy(load_recipe(ROOT / "examples" / "configs" / "track1_qwen3b.yaml"))


NEMO_RL_BAD = [
    (("clipo", "method", "reward_lambda"), 1e300, "clipo.method.reward_lambda=1e+300 must be a finite number in [0, 100]"),
    (("clipo", "method", "temperature"), 1e-45, "clipo.method.temperature=1e-45 must be a finite number in [0.001, 10]"),
    (("clipo", "method", "reward_constant"), 1e300, "clipo.method.reward_constant=1e+300 must be"),
    (("grpo", "num_generations_per_prompt"), 20000, "grpo.num_generations_per_prompt=20000 must be an int in [2, 1024]"),
    (("policy", "generation", "temperature"), -1.0, "policy.generation.temperature=-1.0 must be a finite number in (0, 10]"),
    (("policy", "generation", "top_p"), 5.0, "policy.generation.top_p=5.0 must be a finite number in (0, 1]"),
    (("policy", "max_grad_norm"), -1.0, "policy.max_grad_norm=-1.0 must be a finite number >= 0"),
    (("policy", "megatron_cfg", "optimizer", "lr"), float("nan"), "policy.megatron_cfg.optimizer.lr=nan must be"),
    (("loss_fn", "reference_policy_kl_penalty"), -1.0, "loss_fn.reference_policy_kl_penalty=-1.0 must be"),
]  # fmt: skip


@pytest.mark.parametrize("path, value, named", NEMO_RL_BAD, ids=lambda x: str(x))
def test_the_nemo_rl_driver_applies_the_same_rules(monkeypatch, path, value, named):
    from clipo_megatron.nemo_rl.config import validate_master_config

    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    cfg = _master()
    validate_master_config(copy.deepcopy(cfg))  # the recipe as shipped passes
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ValueError) as e:
        validate_master_config(cfg)
    assert named in str(e.value) and "\n" not in str(e.value)
