# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The one record every dataset adapter returns, whatever the source (the runner's training
and held-out problems, the eval suites, the NeMo-RL processors' cross-checks)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from clipo_megatron.data.templates import MATH

SYSTEM = "You are a helpful assistant."
# One worked example as a previous chat turn teaches a 135M model the answer format.
# The worked example counts before it answers, so the model writes a short chain whose steps vary
# between rollouts (and are sometimes wrong while the answer is right): what CLIPO ranks correct
# answers by. A bare "4 + 3 = 7." example made every correct answer one template, and CLIPO then
# leaves GRPO's advantages unchanged (docs/cpu_demo.md, "Why this task").
ONE_SHOT = [
    (
        "Calculate 4 + 3.",
        "Start at 4 and count up 3: 5, 6, 7. So 4 + 3 = 7. The final answer is \\boxed{7}.",
    )
]


@dataclass(frozen=True)
class Record:
    prompt: str  # the user message: question + "\n" + the paper's instruction for the dataset
    ground_truth: str  # the final answer (a number / expression, or an option letter for "mc")
    kind: str  # "math" (\boxed{} + math-verify) or "mc" (option letter)
    data_source: str  # where it came from: "conrl/gsm8k" (authors' files), "hf:openai/gsm8k", "gym:gsm_symbolic"
    index: int  # position in the source (stable: resumable evals key samples by it)
    dataset: str = ""  # canonical dataset name (`clipo_megatron.data.registry`)
    # The CPU task's layout: a system prompt and one worked example before the question.
    few_shot: bool = False

    @property
    def messages(self) -> list[dict[str, str]]:
        """The paper's chat input: one user message, no system prompt (App. "Prompt
        Construction"); with `few_shot`, the small-model layout (system, worked example)."""
        if not self.few_shot:
            return [{"role": "user", "content": self.prompt}]
        msgs = [{"role": "system", "content": SYSTEM}]
        for q, a in ONE_SHOT:
            msgs += [
                {"role": "user", "content": f"{q}\n{MATH}"},
                {"role": "assistant", "content": a},
            ]
        return msgs + [{"role": "user", "content": self.prompt}]

    def to_dict(self) -> dict:
        return asdict(self)
