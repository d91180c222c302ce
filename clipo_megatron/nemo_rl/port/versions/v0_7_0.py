# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL release v0.7.0 (tag 81aa43dda, 2026-07-29; container nvcr.io/nvidia/nemo-rl:v0.7.0): a
dict master config, no MetricNormalizer. On a resume with a Megatron-Core newer than its pin it
loses the optimizer state (the policy warns; docs/nemo_rl.md)."""

from __future__ import annotations

from clipo_megatron.nemo_rl.port.version import Probes

NAME = "v0.7.0"
COMMIT = "81aa43dda4765b0429cf31dab44441e4e4383911"
PACKAGE_VERSION = "0.7.0"
DATE = "2026-07-29"
PROBES = Probes(metric_normalizer=False, rank0_tokenizer_save=False)
COMMITLESS_CAVEAT = None  # a release: its version string and probes name it


def rebindings(loop: str) -> tuple:
    from clipo_megatron.nemo_rl.port.seams import rebindings_of

    return rebindings_of(loop)


def seams(loop: str | None = None) -> tuple:
    from clipo_megatron.nemo_rl.port.seams import seams_of

    return seams_of(loop)
