# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper's per-dataset instructions (App. "Prompt Construction", Table "Instruction Templates").

Prompt(q, d) = q + "\\n" + Instruction(d), one `user` message, no system
prompt. Math datasets ask for `\\boxed{}`; multiple-choice ones also list the
option letters. The strings are the appendix table's, character for
character ("eg", not "e.g." as the main text has; the authors' files agree
with the appendix).
"""

from __future__ import annotations

MATH = "Let's think step by step and output the final answer within \\boxed{}."
MMLU = "Let's think step by step and output the final answer (eg, A, B, C, D) within \\boxed{}."
TRUTHFULQA = (
    "Let's think step by step and output the final answer (eg, A, B, C, D, ...) within \\boxed{}."
)
COMMONSENSEQA = (
    "Let's think step by step and output the final answer (eg, A, B, C, D, E) within \\boxed{}."
)

# canonical dataset name -> instruction (rows of the appendix table, grouped as there)
INSTRUCTIONS: dict[str, str] = {
    **dict.fromkeys(("gsm8k", "gsm_p1", "gsm_p2", "gsm_symbolic"), MATH),
    **dict.fromkeys(("math500", "amc23", "aime24", "aime25"), MATH),
    # Math-Perturb and the training sets are MATH variants: same instruction (paper Sec. 4.1).
    **dict.fromkeys(
        ("math_perturb_simple", "math_perturb_hard", "gsm8k_train", "math_train"), MATH
    ),
    "theoremqa": MATH,
    "mmlu": MMLU,
    "truthfulqa": TRUTHFULQA,
    "commonsense_qa": COMMONSENSEQA,
    "basic_arithmetic": MATH,  # the offline CPU task
}


def instruction_for(dataset: str) -> str:
    """The instruction for a dataset name or alias (`math`, `aime`, `commonsenseqa`, `mmlu2k`, ...)."""
    from clipo_megatron.data.registry import canonical_name

    return INSTRUCTIONS[canonical_name(dataset)]


def build_prompt(question: str, dataset: str) -> str:
    """q + newline + instruction; a question that already ends with it (the authors' files) is kept."""
    instruction = instruction_for(dataset)
    q = question.rstrip()
    return q if q.endswith(instruction) else f"{q}\n{instruction}"


def format_choices(question: str, options: list[str]) -> str:
    """A multiple-choice question in the authors' layout: question, blank line, "Options:", "A. ..." lines."""
    if not 2 <= len(options) <= 26:
        raise ValueError(f"a multiple-choice question needs 2..26 options, got {len(options)}")
    lines = [f"{chr(65 + i)}. {str(o).strip()}" for i, o in enumerate(options)]
    return f"{question.rstrip()}\n\nOptions:\n" + "\n".join(lines)
