# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Binary rewards from `\\boxed{}` answers (paper App. "Verifiable Reward Models").

The last `\\boxed{...}` of a response (braces balanced, so nested braces
survive) is compared with the ground truth by math-verify. math-verify's
timeouts use signals, which only work in the main thread: call `verify_*`
from the main thread, or from worker *processes*, never from threads
(`timeout_seconds=None` disables them where that is unavoidable).
"""

from __future__ import annotations


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}); None when there is none or it is unclosed."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def verify_math(response: str, ground_truth: str, *, timeout_seconds: int | None = 5) -> float:
    """1.0 if the last boxed answer equals the ground truth (math-verify), else 0.0."""
    from math_verify import parse, verify

    answer = last_boxed(response)
    if answer is None or not answer.strip():
        return 0.0
    kw = {} if timeout_seconds is not None else {"parsing_timeout": None}
    gold = parse(f"${ground_truth}$", **kw)
    pred = parse(f"${answer}$", **kw)
    if not gold or not pred:
        return float(answer.strip() == str(ground_truth).strip())
    vkw = {} if timeout_seconds is not None else {"timeout_seconds": None}
    return float(bool(verify(gold, pred, **vkw)))


def verify_batch(responses: list[str], ground_truths: list[str]) -> list[float]:
    if len(responses) != len(ground_truths):
        raise ValueError(f"{len(responses)} responses but {len(ground_truths)} ground truths")
    return [verify_math(r, g) for r, g in zip(responses, ground_truths)]
