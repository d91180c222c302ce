# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What a supported NeMo-RL version module (`versions/`) declares, and the source probes that tell
the versions apart where the commit is unknown (wheels, tarballs, containers without .git)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Probes:
    """Definitions in NeMo-RL's source that tell the supported versions apart without a commit."""

    metric_normalizer: bool  # `class MetricNormalizer` in algorithms/loss/interfaces.py
    rank0_tokenizer_save: bool  # `def save_tokenizer_on_rank0` in utils/native_checkpoint.py

    def __str__(self) -> str:
        def word(found: bool) -> str:
            return "present" if found else "absent"

        return (
            f"MetricNormalizer {word(self.metric_normalizer)}, "
            f"save_tokenizer_on_rank0 {word(self.rank0_tokenizer_save)}"
        )

    def within(self, other: Probes) -> bool:
        """Every probe present here is present in `other` (an older tree of the same line)."""
        return all(not mine or theirs for mine, theirs in zip(self._flags(), other._flags()))

    def _flags(self) -> tuple[bool, bool]:
        return self.metric_normalizer, self.rank0_tokenizer_save


def probe(pkg_dir: Path) -> Probes:
    """Read the probes from the source (no import: the modules pull in ray and torch)."""
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


# The names every module in `versions/` defines (`versions.SUPPORTED` refuses one without them).
VERSION_MODULE_NAMES = (
    "NAME",  # how users and messages call it: a release's tag, or main@<short sha>
    "COMMIT",  # the full commit the contract suite ran against
    "PACKAGE_VERSION",  # what its package_info reports (the base, before any "+sha")
    "DATE",  # the commit's date, YYYY-MM-DD
    "PROBES",  # `Probes` as its source reads
    "COMMITLESS_CAVEAT",  # the warning when it is recognised by version and probes alone, or None
    "rebindings",  # (loop name) -> the `rebinding.Rebinding`s CLIPO binds in that loop
    "seams",  # (loop name | None) -> the seams the preflight reads in its source before a run
)
