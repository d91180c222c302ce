# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Answer verification for rewards and evaluation (paper App. "Verifiable Reward Models").

    from clipo_megatron.verify import verify_batch
    verify_batch(["... \\\\boxed{18}"], ["18"], "math")   # [1.0]
    verify_batch(["... \\\\boxed{(B)}"], ["B"], "mc")     # [1.0]

`extract` finds the last `\\boxed{}` (linear in the text), `math` grades with
math-verify, `choice` matches option letters, `graders` names the graders and
what a verdict is, `pool` runs batches in worker processes (`pool_worker`) with a
per-answer deadline (math-verify's own signal timeouts fail in threads) and
returns each answer's status (`STATUSES`).
"""

from clipo_megatron.verify.choice import extract_choice, graded_answer, verify_choice
from clipo_megatron.verify.extract import all_boxed, last_boxed, normalize_text
from clipo_megatron.verify.graders import (
    GRADERS,
    KINDS,
    STATUSES,
    Scores,
    Verdict,
    grade_one,
    status_counts,
)
from clipo_megatron.verify.math import grade_math_answer, verify_math
from clipo_megatron.verify.pool import VerifierPool, grade_batch, shared_pool, verify_batch

__all__ = [
    "GRADERS",
    "KINDS",
    "STATUSES",
    "Scores",
    "Verdict",
    "VerifierPool",
    "all_boxed",
    "extract_choice",
    "grade_batch",
    "grade_math_answer",
    "grade_one",
    "graded_answer",
    "last_boxed",
    "normalize_text",
    "shared_pool",
    "status_counts",
    "verify_batch",
    "verify_choice",
    "verify_math",
]
