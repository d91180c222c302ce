# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The one record every dataset adapter returns, whatever the source."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Record:
    prompt: str  # the user message: question + "\n" + the paper's instruction for the dataset
    ground_truth: str  # the final answer (a number / expression, or an option letter for "mc")
    kind: str  # "math" (\boxed{} + math-verify) or "mc" (option letter)
    data_source: str  # where it came from: "conrl/gsm8k" (authors' files), "hf:openai/gsm8k", "gym:gsm_symbolic"
    index: int  # position in the source (stable: resumable evals key samples by it)
    dataset: str = ""  # canonical dataset name (`clipo_megatron.data.registry`)

    @property
    def messages(self) -> list[dict[str, str]]:
        """The paper's chat input: one user message, no system prompt (App. "Prompt Construction")."""
        return [{"role": "user", "content": self.prompt}]

    def to_dict(self) -> dict:
        return asdict(self)
