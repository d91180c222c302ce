# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""scripts/test.sh's banner names the megatron-core release each leg runs, not this project's commit.

megatron-core 0.19's `megatron.core.__version__` appends the git commit of the working directory
(run from this checkout: ours). The banner's command is run as test.sh runs it (from the checkout)
and compared with the installed distribution's METADATA, read directly.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _banner_commands() -> list[tuple[str, str]]:
    text = (ROOT / "scripts" / "test.sh").read_text()
    return re.findall(r"megatron-core \$\((\.venv\w*)/bin/(python -c '[^']*')", text)


def test_banner_has_a_megatron_core_version_per_leg():
    assert [venv for venv, _ in _banner_commands()] == [".venv", ".venv312"]


@pytest.mark.parametrize("venv,command", _banner_commands())
def test_banner_prints_the_installed_release(venv, command):
    metadata = sorted(
        (ROOT / venv).glob("lib/python3.*/site-packages/megatron_core-*.dist-info/METADATA")
    )
    if not metadata:
        pytest.skip(f"{venv} has no megatron-core (scripts/setup_env.sh builds it)")
    (release,) = re.findall(r"^Version: (\S+)$", metadata[-1].read_text(), re.M)
    out = subprocess.run(
        f"{venv}/bin/{command}", shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == release
