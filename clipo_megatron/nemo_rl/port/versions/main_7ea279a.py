# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL main at 7ea279a (2026-08-22): the release before it plus MetricNormalizer, a pydantic
master config and rank-0 tokenizer saving. Its package_info still reports 0.6.0, so a commit-less tree is recognised
by its probes, and a later main that keeps them would match too (`COMMITLESS_CAVEAT`)."""

from __future__ import annotations

from clipo_megatron.nemo_rl.port.version import Probes

NAME = "main@7ea279a"
COMMIT = "7ea279abfbeb698b092856d0dab61e7cf39bc909"
PACKAGE_VERSION = "0.6.0"
DATE = "2026-08-22"
PROBES = Probes(metric_normalizer=True, rank0_tokenizer_save=True)
COMMITLESS_CAVEAT = (
    "NeMo-RL 0.6.0 without a known commit: its source matches main@7ea279a, but a later main that "
    "keeps the same seams would match too; install from git so the commit is checked"
)


def rebindings(loop: str) -> tuple:
    """The same bindings as the release before it: the estimator and iterator did not move."""
    from clipo_megatron.nemo_rl.port.seams import rebindings_of

    return rebindings_of(loop)


def seams(loop: str | None = None) -> tuple:
    from clipo_megatron.nemo_rl.port.seams import seams_of

    return seams_of(loop)
