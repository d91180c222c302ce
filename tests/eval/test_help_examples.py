# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron eval --help`: every example in it parses, and the `--run` one names a run dir.

A help example a new user copies must run: each line is routed as `clipo-megatron` routes it and
parsed by that module's own parser; `--run` must name a `train` output dir that the main job
(scripts/train.sh = `compare --out runs/cpu_demo`) writes, not compare's parent directory.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from clipo_megatron import cli
from clipo_megatron.eval import run as eval_run

ROOT = Path(__file__).resolve().parents[2]


def _help(capsys) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main(["eval", "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _examples(text: str) -> list[list[str]]:
    lines = [ln.split("#")[0].strip() for ln in text.splitlines()]
    return [shlex.split(ln)[1:] for ln in lines if ln.startswith("clipo-megatron eval ")]


def test_help_lists_run_and_config(capsys):
    text = _help(capsys)
    opts = text[text.index("options:") :]
    assert re.search(r"^  --run DIR ", opts, re.M) and re.search(r"^  --config YAML ", opts, re.M)


def test_every_help_example_parses(capsys):
    from clipo_megatron.runner import heldout

    examples = _examples(_help(capsys))
    assert len(examples) == 7
    routed = []
    for argv in examples:
        if argv[1:2] in (["compare"], ["paper"]):
            continue  # own parsers: tests/eval/test_cli.py, tests/eval/test_paper_row.py
        module = cli._module_for(argv)
        if module == cli._RUNNER_HELDOUT:
            args = heldout.parser().parse_intermixed_args(argv[1:])
            routed.append(("heldout", args.run, args.config))
        else:
            args = eval_run._parser().parse_args(argv[1:])
            assert args.suite or args.datasets
            routed.append(("suite", args.suite, args.datasets))
    assert [r[0] for r in routed] == ["suite", "suite", "suite", "heldout", "heldout"]
    (run_ex,) = [r[1] for r in routed if r[0] == "heldout" and r[1]]
    (config_ex,) = [r[2] for r in routed if r[0] == "heldout" and r[2]]
    assert (ROOT / config_ex).is_file()
    # the main job's arms: compare --out runs/cpu_demo --objectives grpo --seeds 0
    from clipo_megatron.reporting.compare_report import run_dir

    train_sh = (ROOT / "scripts" / "train.sh").read_text()
    out = re.search(r"--objectives (\w+) --seeds (\d+) --out (\S+)", train_sh)
    assert out is not None
    arms = [run_dir(Path(out[3]), out[1], arm, int(out[2])) for arm in ("clipo", "baseline")]
    assert Path(run_ex) in arms


def test_compare_parent_dir_names_an_arm(tmp_path):
    """`eval --run <compare OUT>` says which dirs to pass instead (before any model loads)."""
    from clipo_megatron.runner import heldout

    for arm in ("clipo", "baseline"):
        (tmp_path / "grpo" / arm / "seed0").mkdir(parents=True)
        (tmp_path / "grpo" / arm / "seed0" / "config.json").write_text("{}")
    args = heldout.parser().parse_intermixed_args(["--run", str(tmp_path)])
    with pytest.raises(FileNotFoundError) as e:
        heldout._resolve(args, load_config=None)
    assert str(e.value) == (
        f"{tmp_path} is a `clipo-megatron compare` output, not one run: pass one of its runs, "
        f"e.g. --run {tmp_path}/grpo/baseline/seed0 (2 there)"
    )


def test_run_or_config_reaching_the_suite_module_is_refused(capsys):
    assert eval_run.main(["--run", "x"]) == 2
    assert "--run / --config are handled by `clipo-megatron eval`" in capsys.readouterr().err
