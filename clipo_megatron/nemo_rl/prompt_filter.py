# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Drop over-long prompts before the run, as the authors' verl does (`filter_overlong_prompts`).

NeMo-RL keeps a prompt longer than `data.max_input_seq_length`: the processors (NeMo-RL's and
`nemo_rl/data.py`) cut it to a few tokens and set its loss multiplier to 0, so the row still
takes a prompt's slot in a batch, costs its rollouts and enters CLIPO's groups. verl's
`RLHFDataset` drops it when the dataset is built: it keeps a row when its chat-template token
count is at most `max_prompt_length` (512 in the authors' scripts). With
`clipo.drop_overlong_prompts: true` (the reproduction recipes) the driver drops those rows from
the training and validation datasets before NeMo-RL's `setup` (`drop_from_dataset`); the
preflight counts the training rows it will drop (`guard/prompt_count.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import Subset


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
