# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Drop over-long prompts before the run, as the authors' verl does (`filter_overlong_prompts`).

NeMo-RL keeps a prompt longer than `data.max_input_seq_length`: the processors (NeMo-RL's and
`nemo_rl/data.py`) cut it to a few tokens and set its loss multiplier to 0, so the row still
takes a prompt's slot in a batch, costs its rollouts and enters CLIPO's groups. verl's
`RLHFDataset` drops it when the dataset is built: it keeps a row when its chat-template token
count is at most `max_prompt_length` (512 in the authors' scripts). With
`clipo.drop_overlong_prompts: true` (the reproduction recipes) the driver drops those rows from
the training and validation datasets before NeMo-RL's `setup` (`drop_from_dataset`), and the
preflight counts the training rows it will drop (`count_in_files`), with the run's tokenizer
read from the local cache only (it never downloads).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import Subset

# No processor truncates while lengths are measured.
_NO_LIMIT = sys.maxsize


@dataclass(frozen=True)
class PromptCount:
    dropped: int
    total: int
    limit: int

    def line(self) -> str:
        return f"dropped {self.dropped} of {self.total} prompts over {self.limit} tokens"


def kept(lengths: Iterable[int], limit: int) -> list[int]:
    """Indices of the prompts verl keeps: token count <= the limit."""
    return [i for i, n in enumerate(lengths) if n <= limit]


def drop_from_dataset(dataset: Any, limit: int) -> PromptCount:
    """Drop the rows of a NeMo-RL `AllTaskProcessedDataset` whose prompt is over `limit` tokens
    (the processor's `length`, measured before it truncates); returns the count. Its rows are an
    HF `Dataset` (`select`) or, for mixed sources, NeMo-RL's `ConcatDataset` (a `Subset`)."""
    lengths = [int(dataset[i]["length"]) for i in range(len(dataset))]
    keep = kept(lengths, limit)
    if len(keep) < len(lengths):
        rows = dataset.dataset
        dataset.dataset = rows.select(keep) if hasattr(rows, "select") else Subset(rows, keep)
    return PromptCount(len(lengths) - len(keep), len(lengths), limit)


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
    from clipo_megatron.nemo_rl.preflight_data import entries, local_file

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
