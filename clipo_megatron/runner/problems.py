# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner's training / held-out problems: reasoning-gym (offline default) or a local file.

A thin adapter over the data layer, which holds every parsing rule (row layouts and
field names, GSM8K `#### 42` and `\\boxed{}` answers, the paper's instruction):
`data/files.py` reads a GSM8K / MATH style .jsonl or .parquet (flat question/answer
rows or the authors' verl layout), `data/arithmetic.py` generates the CPU task.
Both return `data.records.Record`. Hub datasets: export them to jsonl first
(`datasets.load_dataset(...).to_json(path)`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from clipo_megatron.data.arithmetic import arithmetic_problems
from clipo_megatron.data.files import SizeCaps, load_file
from clipo_megatron.data.records import Record
from clipo_megatron.data.registry import get_spec

# A local file is read as a math set: the paper's \boxed{} instruction, math-verify rewards.
LOCAL_FILE_DATASET = "gsm8k"


def size_caps(data_cfg) -> SizeCaps:
    """The data block's caps (data.max_row_chars / data.max_file_mb; the defaults where a caller
    passes no config), named by their config keys in the errors."""
    d = SizeCaps()
    return SizeCaps(
        getattr(data_cfg, "max_row_chars", d.max_row_chars),
        getattr(data_cfg, "max_file_mb", d.max_file_mb),
        row_key="data.max_row_chars",
        file_key="data.max_file_mb",
    )


def jsonl_problems(
    path: str | Path,
    size: int,
    *,
    offset: int = 0,
    one_shot: bool = True,
    caps: SizeCaps | None = None,
) -> list[Record]:
    """`size` problems from a local file, starting at row `offset` (size <= 0: all rows)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"data file {p} does not exist (data.path / eval.path must be a local jsonl)"
        )
    records = load_file(p, get_spec(LOCAL_FILE_DATASET), caps)[offset:]
    records = records if size <= 0 else records[:size]
    if not records:
        raise ValueError(f"{p}: no rows at offset {offset}")
    # positions in this selection: the runner keys groups by them
    return [dataclasses.replace(r, index=i, few_shot=one_shot) for i, r in enumerate(records)]


def load_problems(data_cfg, size: int, *, seed_offset: int = 0, path: str = "") -> list[Record]:
    """Problems from a local file (`path`) or reasoning-gym at seed data.seed + seed_offset
    (training: 0; held-out evaluation: another seed)."""
    if path:
        return jsonl_problems(path, size, one_shot=data_cfg.one_shot, caps=size_caps(data_cfg))
    return arithmetic_problems(
        size, data_cfg.seed + seed_offset, dataset=data_cfg.dataset, one_shot=data_cfg.one_shot
    )


def step_problems(problems: list[Record], step: int, p: int) -> list[Record]:
    """Step `step`'s `p` problems: the next ones in order from step * p (wrapping), skipping a
    prompt already drawn for this step. A generated task repeats questions (reasoning-gym's
    one-digit sums have 242), and a prompt twice in one step is one group counted twice and one
    fewer problem learned from. Deterministic in (problems, step): a resume draws the same."""
    start = (step * p) % len(problems)
    batch: list[Record] = []
    seen: set[str] = set()
    for i in range(len(problems)):
        r = problems[(start + i) % len(problems)]
        if r.prompt not in seen:
            seen.add(r.prompt)
            batch.append(r)
            if len(batch) == p:
                return batch
    raise ValueError(
        f"rollout.prompts_per_step={p} but the task has {len(seen)} distinct prompts: "
        "lower rollout.prompts_per_step or raise data.train_size"
    )
