# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which NeMo-RL is installed: identified by commit when known, by version + probes otherwise.

Issue item 1: a git checkout reports `0.7.0+<sha>` and was refused; these tests build fake
NeMo-RL packages on disk (version, the two probed source seams, a git tree or none, over the
seams the extension uses: fake_nemo_rl.py) and run the real `check_supported` on them. Issue 23
item 7: a moved seam is named in one line whatever the commit, and is never let through. `CLIPO_NEMO_RL_CHECKOUTS=<dir>:<dir>` also runs `detect` on
real NeMo-RL checkouts (only `nemo_rl/__init__.py` is imported: no NeMo-RL dependencies).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.port import compat
from tests.nemo_rl.fake_nemo_rl import write_tree

ROOT = Path(__file__).resolve().parents[2]
V070 = "81aa43dda4765b0429cf31dab44441e4e4383911"  # `git rev-parse 'v0.7.0^{commit}'`
MAIN = "7ea279abfbeb698b092856d0dab61e7cf39bc909"
OTHER_MAIN = "2ebd36f18"  # 7ea279a's parent on main (2026-08-22)
CHECKOUTS_ENV = "CLIPO_NEMO_RL_CHECKOUTS"
CONTAINER_ENV = "NEMO_RL_COMMIT"  # set by NeMo-RL's docker/Dockerfile


def _git(cwd: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """`make(version, ...)` writes a NeMo-RL stand-in under `root` and puts it on sys.path."""
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "nemo_rl"}
    for k in saved:
        del sys.modules[k]
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no git tree above tmp_path
    for var in (compat.ALLOW_ENV, CONTAINER_ENV):
        monkeypatch.delenv(var, raising=False)

    def make(version, *, normalizer=False, rank0=False, root=None) -> Path:
        pkg = write_tree((root or tmp_path / "site") / "nemo_rl", normalizer=normalizer)
        files = {  # over the seams the extension uses (fake_nemo_rl.py)
            "__init__.py": f"__version__ = {version!r}\n",
            "utils/native_checkpoint.py": (
                "def save_tokenizer_on_rank0(tokenizer, path):\n    pass\n" if rank0 else ""
            ),
        }
        for rel, text in files.items():
            (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
            (pkg / rel).write_text(text)
        monkeypatch.syspath_prepend(str(pkg.parent))
        return pkg

    yield make
    for k in [k for k in sys.modules if k.split(".")[0] == "nemo_rl"]:
        del sys.modules[k]
    sys.modules.update(saved)


# ----------------------------------------------------------------------------- through check_supported


@pytest.mark.parametrize(
    "version, normalizer, rank0, name, commit",
    [
        (f"0.7.0+{V070[:9]}", False, False, "v0.7.0", V070[:9]),  # refused before issue item 1
        (f"0.6.0+{MAIN[:9]}", True, True, "main@7ea279a", MAIN[:9]),
        (f"0.7.0+{V070[:12]}", False, False, "v0.7.0", V070[:12]),  # a longer short sha
        ("0.7.0", False, False, "v0.7.0", None),  # a wheel / tarball / NO_VCS_VERSION=1
    ],
)
def test_supported_versions_are_recognised(fake, version, normalizer, rank0, name, commit):
    fake(version, normalizer=normalizer, rank0=rank0)
    flavour = compat.check_supported()
    assert (flavour.name, flavour.commit, flavour.version) == (name, commit, version)
    assert flavour.has_metric_normalizer is normalizer and flavour.caveat is None


@pytest.mark.parametrize(
    "version, normalizer, rank0, found",
    [
        (f"0.6.0+{OTHER_MAIN}", True, True, f"commit {OTHER_MAIN}, not a supported one"),
        (f"0.7.0+{MAIN[:9]}", False, False, "commit 7ea279abf is main@7ea279a, but the code"),
        ("0.6.0", True, False, "older than main@7ea279a"),
        ("0.6.0", False, False, "MetricNormalizer absent"),  # v0.6.0 or an older main
        ("0.7.0", True, True, "MetricNormalizer present"),
        ("0.8.0", True, True, "commit unknown"),
    ],
)
def test_unsupported_fails_in_one_line_naming_it(
    fake, monkeypatch, version, normalizer, rank0, found
):
    fake(version, normalizer=normalizer, rank0=rank0)
    with pytest.raises(compat.UnsupportedNemoRLError) as err:
        compat.check_supported()
    msg = str(err.value)
    assert msg.startswith(f"NeMo-RL {version} (") and found in msg and "\n" not in msg
    assert "v0.7.0, main@7ea279a" in msg and compat.ALLOW_ENV in msg and "git clone" in msg
    monkeypatch.setenv(compat.ALLOW_ENV, "1")  # the documented escape hatch warns instead
    with pytest.warns(UserWarning, match=version.replace("+", r"\+")):
        assert not compat.check_supported().supported


def test_unknown_nemo_rl_with_matching_seams_says_so_and_how_to_proceed(fake):
    fake(f"0.6.0+{OTHER_MAIN}", normalizer=True, rank0=True)
    with pytest.raises(compat.UnsupportedNemoRLError) as err:
        compat.check_supported()
    n = len(compat.seams.seams_of())
    assert not isinstance(err.value, compat.SeamsMovedError) and n > 20
    assert str(err.value) == (
        f"NeMo-RL 0.6.0+{OTHER_MAIN} (commit {OTHER_MAIN}, not a supported one) is not supported by "
        f"this clipo_megatron; supported: v0.7.0, main@7ea279a; its {n} seams this integration "
        "uses all match, so it may work: run `NEMO_RL_SRC=<checkout> bash scripts/test_nemo_rl.sh` "
        f"and, if it passes, set {compat.ALLOW_ENV}=1; or install v0.7.0 or main@7ea279a from git "
        "(`git clone https://github.com/NVIDIA-NeMo/RL && git -C RL checkout <81aa43dda|7ea279abf>`, "
        "docs/nemo_rl.md)"
    )


@pytest.mark.parametrize(
    "version, normalizer, rank0, note",
    [
        (f"0.6.0+{OTHER_MAIN}", True, True, f"commit {OTHER_MAIN}, not a supported one"),
        (f"0.7.0+{V070[:9]}", False, False, f"commit {V070[:9]}"),  # supported, but edited
    ],
)
def test_a_moved_seam_is_one_line_and_never_let_through(
    fake, monkeypatch, version, normalizer, rank0, note
):
    pkg = fake(version, normalizer=normalizer, rank0=rank0)
    worker = pkg / "models/policy/workers/megatron_policy_worker.py"
    worker.write_text(worker.read_text().replace("get_microbatch_iterator", "make_microbatches"))
    for allow in ("0", "1"):  # the escape hatch for unknown commits does not cover moved seams
        monkeypatch.setenv(compat.ALLOW_ENV, allow)
        with pytest.raises(compat.SeamsMovedError) as err:
            compat.check_supported()
        (line,) = err.value.lines
        assert str(err.value) == line and line.startswith(
            f"NeMo-RL {version} ({note}): seam 'microbatch iterator' moved: expected get_logprobs "
            "calling the module-level get_microbatch_iterator by that name"
        )
        assert "found no module-level get_microbatch_iterator" in line


def test_main_without_commit_is_accepted_with_a_warning(fake):
    fake("0.6.0", normalizer=True, rank0=True)
    with pytest.warns(UserWarning, match="later main that keeps the same seams"):
        flavour = compat.check_supported()
    assert (flavour.name, flavour.commit) == ("main@7ea279a", None)


def test_container_commit_record(fake, monkeypatch):
    """NeMo-RL's Dockerfile sets $NEMO_RL_COMMIT; it counts only where the code agrees."""
    fake("0.6.0", normalizer=True, rank0=True)
    monkeypatch.setenv(CONTAINER_ENV, MAIN)
    assert compat.check_supported().commit == MAIN
    monkeypatch.setenv(CONTAINER_ENV, V070)  # stale record over mounted main code
    with pytest.raises(compat.UnsupportedNemoRLError, match=r"stale \$NEMO_RL_COMMIT"):
        compat.check_supported()
    monkeypatch.setenv(CONTAINER_ENV, "<unknown>")  # the Dockerfile's default
    with pytest.warns(UserWarning, match="without a known commit"):
        assert compat.check_supported().commit is None


def test_git_work_tree_is_read_and_a_foreign_tree_ignored(fake, tmp_path):
    """The package's own work tree gives HEAD; a wheel inside another project's tree gets that
    project's sha from NeMo-RL's package_info, which must not count as NeMo-RL's commit."""
    project = tmp_path / "project"
    fake(f"0.7.0+{'ab' * 5}", root=project / ".venv" / "site-packages")
    _git(project, "init", "-q")
    _git(project, "commit", "-q", "--allow-empty", "-m", "x")
    flavour = compat.check_supported()
    assert (flavour.name, flavour.commit) == ("v0.7.0", None)

    checkout = tmp_path / "checkout"  # NeMo-RL's own tree, imported with NO_VCS_VERSION=1
    pkg = checkout / "nemo_rl"
    pkg.mkdir(parents=True)
    _git(checkout, "init", "-q")
    _git(checkout, "commit", "-q", "--allow-empty", "-m", "x")
    head = _git(checkout, "rev-parse", "HEAD")
    assert compat.find_commit(pkg, "0.7.0") == head
    assert compat.find_commit(pkg, f"0.7.0+{V070[:9]}") == head  # git beats the suffix


# ----------------------------------------------------------------------------- the pure decision


def test_identify_commit_prefix_and_probes():
    assert compat.COMMITS == {"v0.7.0": V070, "main@7ea279a": MAIN}
    v070, main = compat.EXPECTED["v0.7.0"], compat.EXPECTED["main@7ea279a"]
    assert compat.identify("0.7.0", V070[:7], v070)[0] == "v0.7.0"
    assert compat.identify("0.7.0", V070.upper(), v070)[0] == "v0.7.0"
    assert compat.identify("0.7.0", V070[:6], v070)[0] is None  # too short to be a commit
    assert compat.identify("0.6.0", MAIN, v070)[0] is None  # commit and probes disagree
    assert compat.identify("0.6.0", None, main)[2] is not None  # accepted, with the caveat
    assert compat.identify("0.7.0+deadbeef", None, v070)[0] == "v0.7.0"  # base version only


# ----------------------------------------------------------------------------- real checkouts


def _checkouts() -> list[Path]:
    return [Path(p) for p in os.environ.get(CHECKOUTS_ENV, "").split(os.pathsep) if p]


@pytest.mark.parametrize("no_vcs", ["0", "1"])
def test_real_checkouts_are_identified_by_commit(no_vcs):
    if not _checkouts():
        pytest.skip(f"{CHECKOUTS_ENV} is not set: {CHECKOUTS_ENV}=<NeMo-RL checkout>[:<another>]")
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "from clipo_megatron.nemo_rl.port.compat import detect\n"
        "f = detect(); print(f.name, f.commit, f.version)\n"
    )
    for checkout in _checkouts():
        head = _git(checkout, "rev-parse", "HEAD")
        want = next((n for n, c in compat.COMMITS.items() if c == head), None)
        env = {**os.environ, "NO_VCS_VERSION": no_vcs}
        env.pop(CONTAINER_ENV, None)
        out = subprocess.run(
            [sys.executable, "-c", code, str(checkout), str(ROOT)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        ).stdout.split()
        print(f"\n[compat] {checkout} NO_VCS_VERSION={no_vcs}: {out}")
        assert out[:2] == [str(want), head], checkout


@pytest.mark.nemo_rl
def test_real_nemo_rl_checkout_is_supported():
    if not os.environ.get("NEMO_RL_SRC"):
        pytest.skip(
            "NEMO_RL_SRC is not set: run `NEMO_RL_SRC=<checkout> bash scripts/test_nemo_rl.sh`"
        )
    flavour = compat.check_supported()
    print(f"\n[contract] NeMo-RL at {os.environ['NEMO_RL_SRC']}: {flavour}")
    assert flavour.name in compat.SUPPORTED
