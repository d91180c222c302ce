# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Compatibility names for the runner: `last_boxed`, `verify_math`, `verify_batch(responses, gts)`.

`verify_batch` is the runner's grading seam (tests replace it with a stand-in). New code
imports from `clipo_megatron.verify` directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from clipo_megatron.verify.extract import last_boxed
from clipo_megatron.verify.graders import Scores
from clipo_megatron.verify.math import verify_math
from clipo_megatron.verify.pool import verify_batch as _verify_batch

__all__ = ["last_boxed", "verify_math", "verify_batch"]


def verify_batch(
    responses: Sequence[str], ground_truths: Sequence[str], kind: str | Sequence[str] = "math", **kw
) -> Scores:
    """Math rewards for a batch (worker processes, per-answer deadline), with `.statuses`."""
    return _verify_batch(responses, ground_truths, kind, **kw)
