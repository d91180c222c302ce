# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Datasets for training and evaluation, one interface for every source.

    from clipo_megatron.data import load_dataset
    recs = load_dataset("gsm8k", data_dir="data/clipo")                  # the authors' parquet
    recs = load_dataset("mmlu", source="my/mmlu.jsonl", limit=50)          # a local file, fixed subset
    recs = load_dataset("gsm8k", source="hf")                               # the hub (needs access)
    recs = load_dataset("gsm_symbolic", source="gym", limit=100)            # offline generator
    recs[0].prompt, recs[0].ground_truth, recs[0].kind  # question + paper instruction, answer, "math"|"mc"

`templates` holds the paper's instruction per dataset, `registry` the names
and sources, `files` / `hub` / `gym` the adapters, `arithmetic` the CPU
demo's chat problems.
"""

from clipo_megatron.data.loader import how_to_get, load_dataset, subset
from clipo_megatron.data.records import Record
from clipo_megatron.data.registry import SPECS, DatasetSpec, canonical_name, get_spec
from clipo_megatron.data.templates import build_prompt, instruction_for

__all__ = [
    "SPECS",
    "DatasetSpec",
    "Record",
    "build_prompt",
    "canonical_name",
    "get_spec",
    "how_to_get",
    "instruction_for",
    "load_dataset",
    "subset",
]
