# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Eval sits below the runner: importing it never imports the training loop, and the CLI
routes a training run's held-out evaluation (`eval --run`) to the runner's own module."""

from __future__ import annotations

import subprocess
import sys


def test_eval_package_does_not_import_the_runner():
    code = (
        "import sys, importlib\n"
        "for m in ('run', 'generator', 'engine', 'report', 'aggregate', 'store', 'suites'):\n"
        "    importlib.import_module('clipo_megatron.eval.' + m)\n"
        "bad = sorted(m for m in sys.modules if m.startswith('clipo_megatron.runner'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_cli_routes_eval_run_to_the_runner():
    from clipo_megatron.cli import _module_for

    assert _module_for(["eval", "--run", "runs/x"]) == "clipo_megatron.runner.heldout"
    assert _module_for(["eval", "--config", "c.yaml"]) == "clipo_megatron.runner.heldout"
    assert _module_for(["eval", "--suite", "track1"]) == "clipo_megatron.eval.run"
    assert _module_for(["eval", "compare", "a", "b"]) == "clipo_megatron.eval.run"
    assert _module_for(["train"]) == "clipo_megatron.runner.train"
