# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Training / held-out problems: reasoning-gym (offline default) or a local jsonl (GSM8K, MATH, ...).

A jsonl row needs a question and an answer. Accepted field names:
question|problem|prompt and answer|solution. GSM8K answers ("... #### 42") are cut
to the part after "####"; MATH solutions keep their last \\boxed{...} content.
Hub datasets: export them to jsonl first (`datasets.load_dataset(...).to_json(path)`).
"""

from __future__ import annotations

import json
from pathlib import Path

from clipo_megatron.data.arithmetic import INSTRUCTION, Problem, arithmetic_problems

_Q = ("question", "problem", "prompt")
_A = ("answer", "solution")


def _last_boxed(text: str) -> str | None:
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, j = 0, i + len("\\boxed{")
    for k in range(j, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth < 0:
            return text[j:k]
    return None


def clean_answer(ans: str) -> str:
    """GSM8K '#### 42' -> '42'; a MATH solution -> its last boxed content; else the text."""
    ans = str(ans)
    if "####" in ans:
        return ans.split("####")[-1].strip().replace(",", "")
    return (_last_boxed(ans) or ans).strip()


def jsonl_problems(
    path: str | Path, size: int, *, offset: int = 0, one_shot: bool = True
) -> list[Problem]:
    """`size` problems from a local jsonl, starting at row `offset` (size <= 0: all rows)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"data file {p} does not exist (data.path / eval.path must be a local jsonl)"
        )
    rows = [json.loads(x) for x in p.read_text().splitlines() if x.strip()][offset:]
    rows = rows if size <= 0 else rows[:size]
    out = []
    for i, r in enumerate(rows):
        q = next((r[k] for k in _Q if k in r), None)
        a = next((r[k] for k in _A if k in r), None)
        if q is None or a is None:
            raise ValueError(
                f"{p} row {offset + i}: needs one of {_Q} and one of {_A}, has {sorted(r)}"
            )
        out.append(Problem(i, f"{q}\n{INSTRUCTION}", clean_answer(a), one_shot))
    if not out:
        raise ValueError(f"{p}: no rows at offset {offset}")
    return out


def load_problems(data_cfg, size: int, *, seed_offset: int = 0, path: str = "") -> list[Problem]:
    """Problems from a local jsonl (`path`) or reasoning-gym at seed data.seed + seed_offset
    (training: 0; held-out evaluation: another seed)."""
    if path:
        return jsonl_problems(path, size, one_shot=data_cfg.one_shot)
    return arithmetic_problems(
        size, data_cfg.seed + seed_offset, dataset=data_cfg.dataset, one_shot=data_cfg.one_shot
    )
