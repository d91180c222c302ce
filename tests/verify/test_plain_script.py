# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`verify_batch` from a plain script, from stdin, with bad rows, and a worker that cannot start.

The workers are spawned: they used to re-import the caller's main, so a script without
`if __name__ == "__main__":` ran itself again in every worker (81 lines ending "math-verify
missing", which was installed) and a main read from stdin could not be re-imported at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("math_verify")
pytestmark = pytest.mark.runner

from clipo_megatron.verify.pool import VerifierPool, verify_batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = (
    "from pathlib import Path\n"
    "import sys\n"
    "from clipo_megatron.verify import verify_batch\n"
    "with open(sys.argv[1], 'a') as f:\n"
    "    f.write('ran\\n')\n"
    "print(list(verify_batch(['\\\\boxed{2}', 'no box'], ['2', '3'])))\n"
)


def _python(args: list[str], **kw) -> subprocess.CompletedProcess:
    """`python args` importing this checkout's package (a script's own folder comes first)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env=env,
        **kw,
    )


def test_a_script_without_a_main_guard_runs_once_and_grades(tmp_path):
    script, ran = tmp_path / "plain.py", tmp_path / "ran.txt"
    script.write_text(SCRIPT)
    p = _python([str(script), str(ran)])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[1.0, 0.0]"
    assert ran.read_text() == "ran\n"  # the workers never ran the caller's main


def test_a_script_read_from_stdin_grades(tmp_path):
    ran = tmp_path / "ran.txt"
    p = _python(["-", str(ran)], input=SCRIPT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[1.0, 0.0]"
    assert ran.read_text() == "ran\n"


def test_a_worker_that_cannot_start_says_why(tmp_path):
    (tmp_path / "math_verify.py").write_text("raise ImportError('broken on purpose')\n")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from clipo_megatron.verify.pool import VerifierPool\n"
        "try:\n"
        "    VerifierPool(1).start()\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    p = _python(["-c", code])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == ("a verifier worker could not start: ImportError: broken on purpose")


@pytest.mark.parametrize(
    "responses, truths, message",
    [
        (["\\boxed{2}"], [None], r"ground_truths\[0\] is NoneType None, not a string"),
        (["\\boxed{2}", None], ["2", "3"], r"responses\[1\] is NoneType None, not a string"),
        (["\\boxed{2}", 7], ["2", "7"], r"responses\[1\] is int 7, not a string"),
        (["\\boxed{2}"], [2], r"ground_truths\[0\] is int 2, not a string"),
    ],
)
def test_a_row_that_is_not_a_string_is_named(responses, truths, message):
    pool = VerifierPool(1)  # refused before any worker starts
    with pytest.raises(ValueError, match=message):
        verify_batch(responses, truths, pool=pool)
    assert pool.pids() == []


def _grader_in_main(response: str, ground_truth: str, kind: str) -> float:
    return 1.0


def test_a_grader_defined_in_main_is_refused_with_the_fix():
    _grader_in_main.__module__ = "__main__"  # as if defined in the caller's script
    with pytest.raises(ValueError, match="defined in __main__.*move it into a module"):
        VerifierPool(1).grade(["x"], ["1"], grader=_grader_in_main)
