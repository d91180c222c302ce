# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The `clipo_math` environment's grading, without Ray: settings, one step, statuses to metrics.

NeMo-RL keeps no per-row channel from an environment to the advantage step except the
observation it appends to every message log (the returned metadata is dropped for finished
rows). So the status rides in that text: "Environment: correct" / "Environment: incorrect"
as NeMo-RL's math environment writes them, plus " (verifier <status>)" when the verifier
did not grade the answer (timeout, killed, error, too_long). The advantage step counts them
(`status_metrics`) into `verify/<status>`. No Ray, no NeMo-RL import: the driver reads it too,
and the tests run the environment's step (`grade_messages`) where NeMo-RL is not installed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from clipo_megatron.core.config import check_grader
from clipo_megatron.verify.graders import STATUSES, status_counts
from clipo_megatron.verify.pool import DEFAULT_MAX_CHARS, DEFAULT_TIMEOUT, VerifierPool

_OBSERVATION = re.compile(r"^Environment: (?:correct|incorrect)(?: \(verifier (\w+)\))?$")


@dataclass(frozen=True)
class EnvSettings:
    """`env.clipo_math` keys: num_workers, timeout (s per answer), max_answer_chars (0: no cap),
    grader (written by the driver from `clipo.grader`, the one key: nemo_rl/config.py)."""

    num_workers: int = 8
    timeout: float = DEFAULT_TIMEOUT
    max_answer_chars: int = DEFAULT_MAX_CHARS
    grader: str = "math_verify"

    @classmethod
    def from_cfg(cls, cfg: dict[str, Any] | None) -> EnvSettings:
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - {"num_workers", "timeout", "max_answer_chars", "grader"})
        if unknown:
            raise ValueError(
                f"env.clipo_math.{unknown[0]}: unknown key (known: num_workers, timeout, "
                "max_answer_chars, grader)"
            )
        s = cls(**cfg)
        if not (isinstance(s.num_workers, int) and s.num_workers >= 1):
            raise ValueError(f"env.clipo_math.num_workers={s.num_workers!r} must be an int >= 1")
        if not (isinstance(s.timeout, int | float) and 0 < s.timeout < float("inf")):
            raise ValueError(f"env.clipo_math.timeout={s.timeout!r} must be a finite number > 0")
        check_grader(  # the `clipo.grader` rule, under this key
            "env.clipo_math.grader", s.grader, " (set clipo.grader: the driver writes it here)"
        )
        if not (isinstance(s.max_answer_chars, int) and s.max_answer_chars >= 0):
            raise ValueError(
                f"env.clipo_math.max_answer_chars={s.max_answer_chars!r} must be an int >= 0 "
                "(0: no cap)"
            )
        return s


def _last_assistant(log: list[dict[str, Any]]) -> str:
    for m in reversed(log):
        if m.get("role") == "assistant":
            return str(m["content"])
    return ""


def grade_messages(
    pool: VerifierPool, message_log_batch: list[list[dict[str, Any]]], metadata: list[dict]
) -> tuple[torch.Tensor, list[dict[str, str]]]:
    """The environment's step: (rewards [B] float32, one observation message per rollout).

    The last assistant message of each rollout against `metadata[i]["ground_truth"]`
    (`clipo_kind` "mc": option letter, else math-verify), each under the pool's deadline."""
    responses = [_last_assistant(log) for log in message_log_batch]
    truths = [str(m["ground_truth"]) for m in metadata]
    kinds = [m.get("clipo_kind", "math") for m in metadata]
    verdicts = pool.grade(responses, truths, kinds)
    rewards = torch.tensor([v.score for v in verdicts], dtype=torch.float32)  # [B]
    observations = [
        {"role": "environment", "content": observation(v.score, v.status)} for v in verdicts
    ]
    return rewards, observations


def observation(score: float, status: str) -> str:
    """The environment's reply to one answer (NeMo-RL's math-environment wording)."""
    text = f"Environment: {'correct' if score else 'incorrect'}"
    return text if status == "ok" else f"{text} (verifier {status})"


def status_of(observation_text: str) -> str | None:
    """The status an observation carries ("ok" when it names none); None: not ours."""
    m = _OBSERVATION.match(observation_text.strip())
    if m is None:
        return None
    return m.group(1) or "ok"


def batch_statuses(message_logs: Iterable[list[dict[str, Any]]]) -> list[str]:
    """One status per rollout whose last environment message is ours."""
    out = []
    for log in message_logs:
        env = next((m for m in reversed(log) if m.get("role") == "environment"), None)
        s = status_of(str(env["content"])) if env is not None else None
        if s in STATUSES:
            out.append(s)
    return out


def status_metrics(message_logs: Iterable[list[dict[str, Any]]]) -> dict[str, float]:
    """`verify/<status>` answer counts of a batch (every status, zeros included)."""
    return {f"verify/{k}": float(v) for k, v in status_counts(batch_statuses(message_logs)).items()}
