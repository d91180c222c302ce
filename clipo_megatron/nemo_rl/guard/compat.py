# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which NeMo-RL is installed, and whether this integration supports it.

Supported (each run by the contract suite, `scripts/test_nemo_rl.sh`; docs/nemo_rl.md):

    v0.7.0             tag v0.7.0 = 81aa43dda (2026-07-29); package_info says 0.7.0
    main@7ea279a       main at 7ea279abf (2026-08-22); package_info still says 0.6.0

NeMo-RL is identified by its commit whenever the commit is known, because its version string
is not an identity: a git work tree reports `0.7.0+<short sha>`, and every main commit since
v0.6.0 reports 0.6.0. The commit comes from, in order: `git rev-parse HEAD` where the package
is the top of its own work tree (git checkouts, NeMo-RL's containers, which keep the tree at
/opt/nemo-rl), the `+sha` suffix of `__version__`, then `$NEMO_RL_COMMIT` (the container's
build record). A wheel installed inside some *other* git tree (a project's .venv) gets that
tree's sha from NeMo-RL's package_info; it is ignored, as is a commit that contradicts the
version or the probes (a stale `$NEMO_RL_COMMIT` over mounted code).

Without a commit (wheels, tarballs, containers built without .git) the version string and two
source probes decide (`Probes`). Their limit: main@7ea279a's probes also match any later main
that keeps both seams, so a commit-less 0.6.0 that matches is accepted with a warning that
says so; one that lacks 7ea279a's own seam is an older main and is refused.

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

from clipo_megatron.nemo_rl.guard import seams

SUPPORTED = {
    "v0.7.0": "release v0.7.0 (2026-07-28)",
    "main@7ea279a": "main at 7ea279abfbeb698b092856d0dab61e7cf39bc909 (2026-08-22)",
}
# Full commit and package_info base version of each supported NeMo-RL.
COMMITS = {
    "v0.7.0": "81aa43dda4765b0429cf31dab44441e4e4383911",
    "main@7ea279a": "7ea279abfbeb698b092856d0dab61e7cf39bc909",
}
VERSIONS = {"v0.7.0": "0.7.0", "main@7ea279a": "0.6.0"}
ALLOW_ENV = "CLIPO_ALLOW_UNSUPPORTED_NEMO_RL"
CONTAINER_COMMIT_ENV = "NEMO_RL_COMMIT"  # set by NeMo-RL's docker/Dockerfile (release stage)
_SHA = re.compile(r"[0-9a-f]{7,40}")
_INSTALL = (
    "run `NEMO_RL_SRC=<checkout> bash scripts/test_nemo_rl.sh` and, if it passes, set "
    f"{ALLOW_ENV}=1; or install v0.7.0 or main 7ea279a from git (`git clone "
    "https://github.com/NVIDIA-NeMo/RL && git -C RL checkout <v0.7.0|7ea279a>`, docs/nemo_rl.md)"
)


class UnsupportedNemoRLError(RuntimeError):
    pass


class SeamsMovedError(UnsupportedNemoRLError):
    """A seam the extension uses moved: `lines`, one per seam (`seams.check`)."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Probes:
    """Seams in NeMo-RL's source that tell the supported versions apart without a commit."""

    metric_normalizer: bool  # algorithms/loss/interfaces.py; main since 3b04247b7 (2026-07-08)
    rank0_tokenizer_save: bool  # utils/native_checkpoint.py; added by 7ea279a itself

    def __str__(self) -> str:
        def word(found: bool) -> str:
            return "present" if found else "absent"

        return (
            f"MetricNormalizer {word(self.metric_normalizer)}, "
            f"save_tokenizer_on_rank0 {word(self.rank0_tokenizer_save)}"
        )


EXPECTED = {
    "v0.7.0": Probes(metric_normalizer=False, rank0_tokenizer_save=False),
    "main@7ea279a": Probes(metric_normalizer=True, rank0_tokenizer_save=True),
}


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
    """(SUPPORTED key or None, note, caveat): the decision, a pure function of what was found."""
    base = version.split("+", 1)[0]
    if commit is not None:
        commit = commit.lower()
        name = next((n for n, full in COMMITS.items() if full.startswith(commit)), None)
        if name is None or not _SHA.fullmatch(commit):
            return None, f"commit {commit}, not a supported one", None
        if base != VERSIONS[name] or probes != EXPECTED[name]:
            return (
                None,
                f"commit {commit} is {name}, but the code reports {base} with {probes}: a "
                f"modified tree or a stale ${CONTAINER_COMMIT_ENV}",
                None,
            )
        return name, f"commit {commit}", None
    if base == "0.7.0" and probes == EXPECTED["v0.7.0"]:
        return "v0.7.0", "version 0.7.0, commit unknown, probes match v0.7.0", None
    if base == "0.6.0" and probes == EXPECTED["main@7ea279a"]:
        caveat = (
            "NeMo-RL 0.6.0 without a known commit: its source matches main@7ea279a, but a later "
            "main that keeps the same seams would match too; install from git so the commit is "
            "checked"
        )
        return "main@7ea279a", "main, commit unknown, probes match 7ea279a", caveat
    if base == "0.6.0" and probes.metric_normalizer:
        return None, "main older than 7ea279a (commit unknown; no save_tokenizer_on_rank0)", None
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


def probe(pkg_dir: Path) -> Probes:
    """Read the seams from the source (no import: the modules pull in ray and torch)."""
    return Probes(
        metric_normalizer=_defines(
            pkg_dir / "algorithms" / "loss" / "interfaces.py", r"class MetricNormalizer\b"
        ),
        rank0_tokenizer_save=_defines(
            pkg_dir / "utils" / "native_checkpoint.py", r"def save_tokenizer_on_rank0\b"
        ),
    )


def _defines(path: Path, pattern: str) -> bool:
    try:
        return re.search(rf"^{pattern}", path.read_text(), re.MULTILINE) is not None
    except OSError:
        return False


def detect() -> NemoRLFlavour:
    """Identify the importable NeMo-RL (raises NemoRLMissingError without one)."""
    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    module = importlib.import_module("nemo_rl")
    version = str(getattr(module, "__version__", "unknown"))
    pkg_dir = Path(module.__file__ or ".").resolve().parent
    commit = find_commit(pkg_dir, version)
    probes = probe(pkg_dir)
    name, note, caveat = identify(version, commit, probes)
    moved = tuple(seams.check(pkg_dir))
    return NemoRLFlavour(
        version, name, probes.metric_normalizer, commit, note, caveat, moved, len(seams.all_seams())
    )


def check_supported() -> NemoRLFlavour:
    """Fail early, in one line, when the installed NeMo-RL is not one we test against, and with
    one line per seam when a seam the extension uses has moved (module docstring)."""
    flavour = detect()
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
