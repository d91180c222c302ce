# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which NeMo-RL is installed, and whether this integration supports it.

The supported versions are the modules of `versions/` (each run by the contract suite,
`scripts/test_nemo_rl.sh`): each names its commit, the version its package_info reports, and the
source probes that recognise it.

NeMo-RL is identified by its commit whenever the commit is known, because its version string
is not an identity: a git work tree reports `<version>+<short sha>`, and every main commit since
v0.6.0 reports 0.6.0. The commit comes from, in order: `git rev-parse HEAD` where the package
is the top of its own work tree (git checkouts, NeMo-RL's containers, which keep the tree at
/opt/nemo-rl), the `+sha` suffix of `__version__`, then `$NEMO_RL_COMMIT` (the container's
build record). A wheel installed inside some *other* git tree (a project's .venv) gets that
tree's sha from NeMo-RL's package_info; it is ignored, as is a commit that contradicts the
version or the probes (a stale `$NEMO_RL_COMMIT` over mounted code).

Without a commit (wheels, tarballs, containers built without .git) the version string and the
source probes decide (`version.Probes`). A version whose later commits would match too says so
(its `COMMITLESS_CAVEAT`, a warning); a tree with fewer probes than a supported version of the
same package version is older and is refused.

Anything else fails at start-up with `UnsupportedNemoRLError` (one line naming what was
found and the fix), before a model or a Ray actor is built. `CLIPO_ALLOW_UNSUPPORTED_NEMO_RL=1`
turns the error into a warning for users who ran the contract suite on their own checkout.

Whatever the commit, the seams the extension uses (`seams.py`) are read in the installed
source. A moved seam is `SeamsMovedError`, one line per seam, and no variable turns it into a
warning: that run would fail (or silently capture nothing) later. An unknown NeMo-RL whose seams
all match is still refused, but the message says so and how to proceed.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from clipo_megatron.nemo_rl.port import seams, versions
from clipo_megatron.nemo_rl.port.install import require_nemo_rl
from clipo_megatron.nemo_rl.port.version import Probes, probe

# Name -> title, full commit, package_info base version and probes of each supported NeMo-RL.
SUPPORTED = {v.NAME: f"{v.NAME}, commit {v.COMMIT} ({v.DATE})" for v in versions.SUPPORTED}
COMMITS = {v.NAME: v.COMMIT for v in versions.SUPPORTED}
EXPECTED = {v.NAME: v.PROBES for v in versions.SUPPORTED}
ALLOW_ENV = "CLIPO_ALLOW_UNSUPPORTED_NEMO_RL"
CONTAINER_COMMIT_ENV = "NEMO_RL_COMMIT"  # set by NeMo-RL's docker/Dockerfile (release stage)
_SHA = re.compile(r"[0-9a-f]{7,40}")
_INSTALL = (
    "run `NEMO_RL_SRC=<checkout> bash scripts/test_nemo_rl.sh` and, if it passes, set "
    f"{ALLOW_ENV}=1; or install {' or '.join(COMMITS)} from git (`git clone "
    "https://github.com/NVIDIA-NeMo/RL && git -C RL checkout "
    f"<{'|'.join(c[:9] for c in COMMITS.values())}>`, docs/nemo_rl.md)"
)


class UnsupportedNemoRLError(RuntimeError):
    pass


class SeamsMovedError(UnsupportedNemoRLError):
    """A seam the extension uses moved: `lines`, one per seam (`seams.check`)."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class NemoRLFlavour:
    """What is installed: `name` is a key of SUPPORTED, or None for an unsupported NeMo-RL."""

    version: str  # nemo_rl.__version__
    name: str | None
    has_metric_normalizer: bool  # loss interface declares metric normalisations (main only)
    commit: str | None = None  # full or short sha when known (see the module docstring)
    note: str = ""  # how it was recognised, or why it was refused
    caveat: str | None = None  # accepted, but with this warning (commit unknown)
    seams_moved: tuple[str, ...] = ()  # one line per moved seam (seams.check)
    seams_checked: int = 0

    @property
    def supported(self) -> bool:
        return self.name is not None


def identify(
    version: str, commit: str | None, probes: Probes
) -> tuple[str | None, str, str | None]:
    """(a supported version's NAME or None, note, caveat): the decision, a pure function of what
    was found and of `versions.SUPPORTED`."""
    base = version.split("+", 1)[0]
    if commit is not None:
        commit = commit.lower()
        known = next((v for v in versions.SUPPORTED if v.COMMIT.startswith(commit)), None)
        if known is None or not _SHA.fullmatch(commit):
            return None, f"commit {commit}, not a supported one", None
        if base != known.PACKAGE_VERSION or probes != known.PROBES:
            return (
                None,
                f"commit {commit} is {known.NAME}, but the code reports {base} with {probes}: a "
                f"modified tree or a stale ${CONTAINER_COMMIT_ENV}",
                None,
            )
        return known.NAME, f"commit {commit}", None
    for v in versions.SUPPORTED:
        if base == v.PACKAGE_VERSION and probes == v.PROBES:
            return (
                v.NAME,
                f"commit unknown, probes match {v.NAME}",
                v.COMMITLESS_CAVEAT,
            )
    older = [
        v.NAME for v in versions.SUPPORTED if base == v.PACKAGE_VERSION and probes.within(v.PROBES)
    ]
    if older:
        return None, f"older than {older[0]} (version {base}, commit unknown; {probes})", None
    return None, f"commit unknown, {probes}", None


def find_commit(pkg_dir: Path, version: str) -> str | None:
    """NeMo-RL's commit, or None when it cannot be known (see the module docstring)."""
    git = _git_head(pkg_dir)
    if git is not None:
        top, head = git
        if top == pkg_dir.parent.resolve():
            return head
    else:  # no git here: the suffix package_info computed, if any, is still NeMo-RL's own
        suffix = version.partition("+")[2].lower()
        if _SHA.fullmatch(suffix):
            return suffix
    env = os.environ.get(CONTAINER_COMMIT_ENV, "").strip().lower()
    return env if _SHA.fullmatch(env) else None


def _git_head(pkg_dir: Path) -> tuple[Path, str] | None:
    """(work-tree top, HEAD) of the git tree holding `pkg_dir`, or None outside one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "HEAD"],
            cwd=pkg_dir,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return (Path(out[0]).resolve(), out[1]) if len(out) == 2 else None


def detect(loop: str | None = None) -> NemoRLFlavour:
    """Identify the importable NeMo-RL (raises NemoRLMissingError without one) and read the seams
    a run of `loop` (its name; None: grpo_train's) relies on in its source: the identified
    version's table, the newest supported one's for a NeMo-RL not recognised."""
    require_nemo_rl()
    module = importlib.import_module("nemo_rl")
    version = str(getattr(module, "__version__", "unknown"))
    pkg_dir = Path(module.__file__ or ".").resolve().parent
    commit = find_commit(pkg_dir, version)
    probes = probe(pkg_dir)
    name, note, caveat = identify(version, commit, probes)
    table = (versions.by_name(name) if name else versions.newest()).seams(loop)
    moved = tuple(seams.check(pkg_dir, table))
    return NemoRLFlavour(
        version, name, probes.metric_normalizer, commit, note, caveat, moved, len(table)
    )


def check_supported(loop: str | None = None) -> NemoRLFlavour:
    """Fail early, in one line, when the installed NeMo-RL is not one we test against, and with
    one line per seam when a seam a run of `loop` uses has moved (module docstring)."""
    flavour = detect(loop)
    if flavour.seams_moved:
        where = f"NeMo-RL {flavour.version} ({flavour.note})"
        raise SeamsMovedError([f"{where}: {line}" for line in flavour.seams_moved])
    if flavour.supported:
        if flavour.caveat:
            warnings.warn(flavour.caveat, stacklevel=2)
        return flavour
    msg = (
        f"NeMo-RL {flavour.version} ({flavour.note}) is not supported by this clipo_megatron; "
        f"supported: {', '.join(SUPPORTED)}; its {flavour.seams_checked} seams this integration "
        f"uses all match, so it may work: {_INSTALL}"
    )
    if os.environ.get(ALLOW_ENV) == "1":
        warnings.warn(msg, stacklevel=2)
        return flavour
    raise UnsupportedNemoRLError(msg)
