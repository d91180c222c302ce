# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`run_grpo_clipo.py --validate-only` on success: one OK line; the resolved config only on request.

The preflight itself is stubbed (tests/nemo_rl/test_preflight.py checks it); this tests what a
user sees when it passes.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.guard import preflight as pf

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples/configs/track1_qwen3b.yaml"


@pytest.fixture
def cli(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "run_grpo_clipo", ROOT / "examples/run_grpo_clipo.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config = {"grpo": {"max_num_steps": 7}, "policy": {"model_name": "m"}}
    report = pf.Report(config=config, clipo=ClipoNemoRLConfig.from_dict({}), warnings=["HF_HOME x"])
    monkeypatch.setattr(pf, "preflight", lambda *a, **k: report)
    return mod


def test_success_is_one_ok_line(cli, capsys):
    assert cli.main(["--config", str(RECIPE), "--validate-only"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"preflight OK: {RECIPE} with 1 warning(s) above; "
        "resolved config --verbose prints it, --print-config FILE saves it"
    ]
    assert err.splitlines() == ["warning: HF_HOME x"]


def test_verbose_prints_the_config_then_the_ok_line(cli, capsys):
    assert cli.main(["--config", str(RECIPE), "--validate-only", "--verbose"]) == 0
    out = capsys.readouterr().out
    body, ok = out.rsplit("\n", 2)[0], out.splitlines()[-1]
    assert json.loads(body)["config"]["grpo"]["max_num_steps"] == 7
    assert ok.startswith("preflight OK: ")


def test_print_config_writes_the_file(cli, capsys, tmp_path):
    f = tmp_path / "config.json"
    assert cli.main(["--validate-only", "--print-config", str(f), "--config", str(RECIPE)]) == 0
    assert json.loads(f.read_text())["config"]["policy"]["model_name"] == "m"
    assert capsys.readouterr().out.splitlines() == [
        f"preflight OK: {RECIPE} with 1 warning(s) above; resolved config written to {f}"
    ]


def test_print_config_unwritable_is_one_line_exit_2(cli, capsys, tmp_path):
    f = tmp_path / "no" / "dir" / "config.json"
    assert cli.main(["--validate-only", "--print-config", str(f)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1] == f"--print-config {f}: No such file or directory"


def test_help_shows_the_overrides_and_each_example_loads(cli, capsys, monkeypatch):
    """`--help` says how `key=value` overrides work, and every example in it names keys the
    recipe has (a help example a user copies must load)."""
    import shlex

    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "[key.path=value ...]" in text.splitlines()[0]
    assert "+key.path=value   add a key the recipe does not have" in text
    assert "--config YAML" in text and "`defaults:`" in text
    joined = text[text.index("examples:") :].replace("\\\n", " ")
    examples = [shlex.split(ln)[2:] for ln in joined.splitlines() if "run_grpo_clipo.py" in ln]
    assert len(examples) == 2
    for argv in examples:
        args, overrides = cli.parse_args(argv)
        assert overrides and all("=" in o for o in overrides)
        config = load_recipe(ROOT / args.config, overrides, resolve=False)
        for ov in overrides:  # each override took: the loaded value is the one written
            key, value = ov.split("=", 1)
            node = config
            for part in key.split("."):
                node = node[part]
            assert str(node).lower() == value.lower(), ov
    assert ["clipo.enabled=true", "policy.megatron_cfg.tensor_model_parallel_size=2"] in [
        cli.parse_args(a)[1] for a in examples
    ]


@pytest.mark.parametrize("loop_key", [None, "grpo.async_grpo.enabled", "data_plane.enabled"])
def test_seams_lists_the_recipes_rebindings_then_the_ok_line(cli, capsys, monkeypatch, loop_key):
    config = {"grpo": {"max_num_steps": 7, "async_grpo": {"enabled": loop_key is not None
              and loop_key.startswith("grpo")}}, "data_plane": {"enabled": loop_key == "data_plane.enabled"}}  # fmt: skip
    report = pf.Report(config=config, clipo=ClipoNemoRLConfig.from_dict({}))
    monkeypatch.setattr(pf, "preflight", lambda *a, **k: report)
    assert cli.main(["--config", str(RECIPE), "--validate-only", "--seams"]) == 0
    out = capsys.readouterr().out.splitlines()
    loop = {None: "grpo_train", "grpo.async_grpo.enabled": "async_grpo_train"}.get(
        loop_key, "grpo_train_sync"
    )
    assert f"CLIPO rebinds 2 NeMo-RL names for {loop}" in out[0]
    assert any(
        "get_microbatch_iterator: by microbatches_teed (port/rebinding.py)" in x for x in out
    )
    assert out[-1].startswith("preflight OK: ")
