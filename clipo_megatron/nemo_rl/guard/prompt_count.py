# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The preflight's count of the training prompts `clipo.drop_overlong_prompts` will drop
(`prompt_filter.drop_from_dataset` drops them when the run starts), from the recipe's parquet
files, with the run's tokenizer read from the local cache only (it never downloads)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from clipo_megatron.nemo_rl.guard.preflight_data import entries, local_file
from clipo_megatron.nemo_rl.prompt_filter import PromptCount, kept

# No processor truncates while lengths are measured.
_NO_LIMIT = sys.maxsize


def load_tokenizer(name: str) -> Any:
    """The run's tokenizer from the local Hugging Face cache or a local path (no download)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name, local_files_only=True)


def prompt_lengths(path: Path, processor: str, tokenizer: Any) -> list[int]:
    """Token counts of a data file's prompts as the run's processor builds them."""
    import pyarrow.parquet as pq

    from clipo_megatron.nemo_rl.data import PROCESSORS

    process = PROCESSORS[processor]
    rows = pq.read_table(path).to_pylist()
    return [
        int(process(row, None, tokenizer, _NO_LIMIT, i)["length"]) for i, row in enumerate(rows)
    ]


class NotCountable(ValueError):
    """The preflight cannot count here (the run still filters): the reason is in the line."""


def count_in_files(config: dict[str, Any], tokenizer: Any) -> PromptCount:
    """The training rows `drop_from_dataset` will drop, from the recipe's parquet files."""
    from clipo_megatron.nemo_rl.data import PROCESSORS

    data = config["data"]
    limit = int(data["max_input_seq_length"])
    dropped = total = 0
    for label, entry in entries(data, "train"):
        path = local_file(entry)
        if path is None or path.suffix != ".parquet" or entry.get("processor") not in PROCESSORS:
            raise NotCountable(f"{label} is not a local parquet file with a clipo_* processor")
        lengths = prompt_lengths(path, entry["processor"], tokenizer)
        dropped += len(lengths) - len(kept(lengths, limit))
        total += len(lengths)
    return PromptCount(dropped, total, limit)


def preflight_line(config: dict[str, Any]) -> str:
    """The preflight's count, or why it could not count (the run still filters and prints it)."""
    name = str(((config.get("policy") or {}).get("tokenizer") or {}).get("name", ""))
    why = ""
    try:
        return count_in_files(config, load_tokenizer(name)).line()
    except NotCountable as e:
        why = str(e)
    except OSError as e:  # not in the local cache: say so, never download
        why = f"tokenizer {name!r} is not available locally ({type(e).__name__})"
    return (
        f"prompts over {config['data']['max_input_seq_length']} tokens are dropped at the start "
        f"of the run; not counted here: {why}"
    )
