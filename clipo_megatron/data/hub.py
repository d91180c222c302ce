# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Hugging Face hub copies of the paper's datasets (for users with access).

`datasets` is imported lazily; without it, offline, or without access the
error says so and names the local-file alternative. Each hub layout is
turned into flat rows that `files.row_to_record` understands.
TruthfulQA (mc1) lists the correct answer first; options are shuffled with a
fixed seed so the letter is not always A.
"""

from __future__ import annotations

import random
from typing import Any

from clipo_megatron.data.files import records_with_answers
from clipo_megatron.data.records import Record
from clipo_megatron.data.registry import DatasetSpec, HubSpec


def parse_hub_source(source: str, spec: DatasetSpec) -> HubSpec:
    """`hf` -> the registry's copy; `hf:repo[:config][@split]` -> that one, same row layout."""
    if source in ("hf", "hub"):
        if spec.hub is None:
            raise FileNotFoundError(
                f"no Hugging Face hub copy of {spec.name!r} is known; use the authors' parquet "
                f"({spec.verl_file} under --data-dir) or a local jsonl"
            )
        return spec.hub
    body = source.split(":", 1)[1]
    split = None
    if "@" in body:
        body, split = body.rsplit("@", 1)
    repo, _, config = body.partition(":")
    layout = spec.hub.layout if spec.hub else ("mc_list" if spec.kind == "mc" else "qa")
    return HubSpec(repo, config or None, split or (spec.hub.split if spec.hub else "test"), layout)


def _flat(row: dict[str, Any], layout: str, i: int) -> dict[str, Any] | None:
    """A hub row in a layout -> a flat {question, answer[, choices]} row; None drops it."""
    if layout == "qa":
        return row
    if layout == "mc_list":  # MMLU: question, choices [..], answer int
        return {
            "question": row["question"],
            "choices": list(row["choices"]),
            "answer": row["answer"],
        }
    if layout == "mc_labeled":  # CommonsenseQA: choices {label, text}, answerKey
        return {"question": row["question"], "choices": row["choices"], "answer": row["answerKey"]}
    if layout == "mc1":  # TruthfulQA multiple_choice: mc1_targets {choices, labels (1 = correct)}
        t = row["mc1_targets"]
        opts = list(zip(t["choices"], t["labels"]))
        random.Random(i).shuffle(opts)
        return {
            "question": row["question"],
            "choices": [c for c, _ in opts],
            "answer": next(k for k, (_, lab) in enumerate(opts) if lab == 1),
        }
    if layout == "theoremqa":  # the paper's 747 questions are the ones without a picture
        if row.get("Picture") is not None:
            return None
        return {"question": row["Question"], "answer": row["Answer"]}
    raise ValueError(f"unknown hub layout {layout!r}")


def load_hub(source: str, spec: DatasetSpec) -> list[Record]:
    hub = parse_hub_source(source, spec)
    try:
        import datasets
    except ImportError as e:
        raise FileNotFoundError(
            f"{spec.name}: loading {hub.repo} from the hub needs `pip install datasets`; "
            f"or pass a local file (--source {spec.name}=/path/file.jsonl|.parquet)"
        ) from e
    try:
        ds = datasets.load_dataset(hub.repo, hub.config, split=hub.split)
    except Exception as e:  # offline, gated, renamed: one clear message instead of a deep traceback
        raise FileNotFoundError(
            f"{spec.name}: could not load {hub.repo} (config {hub.config}, split {hub.split}) "
            f"from the Hugging Face hub ({type(e).__name__}: {e}). Log in / go online, or pass "
            f"a local file (--source {spec.name}=/path/file.jsonl|.parquet)"
        ) from e
    src = f"hf:{hub.repo}"
    rows = [(i, _flat(dict(r), hub.layout, i)) for i, r in enumerate(ds)]
    return records_with_answers(((i, r) for i, r in rows if r is not None), spec, src)
