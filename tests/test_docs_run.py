# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The guides' cheap commands run as written (issue 44): every documented `--help`,
`--print-config` and laptop preflight (`--validate-only --no-cluster-env`) over a recipe of this
checkout, taken from the fenced shell blocks of README.md and docs/*.md, runs and exits 0. The
slurm dry runs are tests/nemo_rl/test_docs_commands.py's; commands that train or need a cluster
are not run here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DATA = ROOT.parent / "shared" / "data" / "clipo"  # the paper's parquet files, beside the checkout
SHELL = ("bash", "sh", "console", "shell")
CHEAP = ("--help", "--print-config", "--validate-only")
# how a guide spells an interpreter or the entry point -> what the test runs
PROGRAMS = {
    "$PY": [sys.executable],
    "python": [sys.executable],
    ".venv/bin/python": [sys.executable],
    ".venv/bin/clipo-megatron": [sys.executable, "-m", "clipo_megatron.cli"],
    "clipo-megatron": [sys.executable, "-m", "clipo_megatron.cli"],
}


def shell_lines(text: str) -> list[str]:
    """Every command line of the fenced shell blocks, continuations joined, comments dropped."""
    out: list[str] = []
    lang: str | None = None  # the open fence's language; None outside a fence
    body: list[str] = []
    for line in text.splitlines():
        if not line.strip().startswith("```"):
            body.append(line)
            continue
        if lang is None:  # an opening fence
            lang, body = line.strip()[3:].strip(), []
            continue
        if lang in SHELL:  # a closing fence
            for cmd in "\n".join(body).replace("\\\n", " ").splitlines():
                cmd = " ".join(cmd.split(" #", 1)[0].split())
                if cmd and not cmd.startswith("#"):
                    out.append(cmd)
        lang = None
    return out


def cheap_commands(lines: list[str]) -> list[str]:
    """The documented commands this test runs: a cheap flag, a program it knows, and every file
    they name in this checkout (a bare `my_recipe.yaml` is the reader's own, not run)."""
    picked = []
    for line in lines:
        try:
            words = shlex.split(line)
        except ValueError:  # not a shell line (a heredoc's body, a here-string)
            continue
        env = [w for w in words if re.fullmatch(r"[A-Z_]+=\S*", w)]
        rest = words[len(env) :]
        if not rest or rest[0] not in PROGRAMS or not any(f in rest for f in CHEAP):
            continue
        if "--validate-only" in rest and "--no-cluster-env" not in rest:
            continue  # the cluster preflight: needs NeMo-RL and a cluster
        files = [w for w in rest[1:] if w.endswith((".py", ".yaml")) and not w.startswith("-")]
        if all("/" in f for f in files):  # a bare name (`my_recipe.yaml`) is the reader's file
            picked.append(line)
    return sorted(set(picked))


def documented() -> list[str]:
    return cheap_commands([ln for p in GUIDES for ln in shell_lines(p.read_text())])


def test_the_guides_document_cheap_commands():
    found = documented()
    assert any("--print-config" in c for c in found)
    assert any("run_grpo_clipo.py --help" in c for c in found)
    assert any("--validate-only" in c for c in found)


def test_the_picker_skips_the_readers_own_files_and_cluster_commands():
    lines = shell_lines(
        "```bash\n$PY examples/run_grpo_clipo.py --config my_recipe.yaml --validate-only\n"
        "$PY examples/run_grpo_clipo.py \\\n    --help   # a comment\nsbatch x.sh --help\n```"
    )
    assert lines[-2] == "$PY examples/run_grpo_clipo.py --help"
    assert cheap_commands(lines) == ["$PY examples/run_grpo_clipo.py --help"]


@pytest.mark.parametrize("command", documented())
def test_a_documented_command_runs_as_written(command, tmp_path):
    words = shlex.split(command)
    env = dict(os.environ, HOME=str(tmp_path), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    while re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        key = words.pop(0).split("=", 1)[0]
        if key == "CLIPO_DATA_DIR":
            if not DATA.is_dir():
                pytest.skip(f"the paper's parquet files are not at {DATA}")
            env[key] = str(DATA)
    argv = PROGRAMS[words[0]] + words[1:]
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{command}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


SNAPSHOT = ROOT.parent / "shared" / "upstream" / "NeMo-RL-7ea279a"
NEMO_RL = Path(os.environ.get("NEMO_RL_SRC") or SNAPSHOT)
A_RECIPE = "grpo-qwen3-30ba3b-8n8g-megatron"  # any GRPO Megatron recipe stands for <recipe>
OVERLAY = re.compile(r"```yaml\n(# my_recipe\.yaml\n.*?<recipe>.*?)```", re.S)


@pytest.mark.parametrize("guide", ["README.md", "docs/nemo_rl.md"])
def test_the_opening_overlay_and_preflight_run_as_written(guide, tmp_path):
    """The two-line overlay and the preflight each guide opens with (issue 51), over a real
    NeMo-RL recipe; the laptop's `--no-cluster-env` added, the only change."""
    if not (NEMO_RL / "examples" / "configs" / "recipes" / "llm").is_dir():
        pytest.skip(
            f"needs NeMo-RL's recipes: set NEMO_RL_SRC or lay the 7ea279a source at {SNAPSHOT}"
        )
    text = (ROOT / guide).read_text(encoding="utf-8")
    overlay = OVERLAY.search(text)
    command = next(c for c in shell_lines(text) if "my_recipe.yaml --validate-only" in c)
    assert overlay and "clipo_megatron:clipo.yaml" in overlay.group(1), guide
    (tmp_path / "my_recipe.yaml").write_text(overlay.group(1).replace("<recipe>", A_RECIPE))
    words = shlex.split(command)
    argv = PROGRAMS[words[0]] + [str(ROOT / words[1]), *words[2:], "--no-cluster-env"]
    env = dict(os.environ, HOME=str(tmp_path), NEMO_RL_ROOT=str(NEMO_RL), PYTHONPATH=str(ROOT))
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.startswith("preflight OK"), out.stderr[-2000:]
