# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Answer verification for rewards and evaluation (paper App. "Verifiable Reward Models").

    from clipo_megatron.verify import verify_batch
    verify_batch(["... \\\\boxed{18}"], ["18"], "math")   # [1.0]
    verify_batch(["... \\\\boxed{(B)}"], ["B"], "mc")     # [1.0]

`extract` finds the last `\\boxed{}`, `math` grades with math-verify,
`choice` matches option letters, `pool` runs batches in worker processes
with a working timeout (math-verify's own signal timeouts fail in threads).
"""

from clipo_megatron.verify.choice import extract_choice, verify_choice
from clipo_megatron.verify.extract import all_boxed, last_boxed, normalize_text
from clipo_megatron.verify.math import grade_math_answer, verify_math
from clipo_megatron.verify.pool import (
    KINDS,
    Verdict,
    VerifierPool,
    grade_one,
    shared_pool,
    verify_batch,
)

__all__ = [
    "KINDS",
    "Verdict",
    "VerifierPool",
    "all_boxed",
    "extract_choice",
    "grade_math_answer",
    "grade_one",
    "last_boxed",
    "normalize_text",
    "shared_pool",
    "verify_batch",
    "verify_choice",
    "verify_math",
]
