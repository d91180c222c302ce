# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper's two benchmark suites and their averages (Sec. "Main Results", App. Table "Hyper-parameters").

Track I (GSM8K-trained, Table 1): M-Avg = mean(GSM8K, SYM, P1, P2),
G-Avg = mean(cQA, tQA, thrmQA, MMLU), Avg = mean of all eight; one sample
per question (n = 1). Track II (MATH-trained, Table 2): M-Avg = mean(Math,
Math_S, Math_H), C-Avg = mean(AMC, AIME, AIME25), Avg = mean of all six;
n = 16. Both: temperature 0.6, top-p 0.95, max response 2048 / 4096 tokens (the paper's
text); `track1_greedy` is Track I as the authors' scripts ran it (greedy). Every other
sampling knob is off (top_k 0, min_p 0, repetition_penalty 1) and recorded with the scores.
Avg is the mean over datasets (not over the two group averages), which is
what reproduces the paper's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Suite:
    name: str
    datasets: tuple[str, ...]  # canonical names, in the paper's column order
    groups: dict[
        str, tuple[str, ...]
    ]  # average name -> member datasets ("Avg" = all, added by `group_members`)
    n: int  # samples per question
    max_tokens: int
    temperature: float = 0.6
    top_p: float = 0.95


TRACK1 = Suite(
    "track1",
    (
        "gsm8k",
        "gsm_symbolic",
        "gsm_p1",
        "gsm_p2",
        "commonsense_qa",
        "truthfulqa",
        "theoremqa",
        "mmlu",
    ),
    {
        "M-Avg": ("gsm8k", "gsm_symbolic", "gsm_p1", "gsm_p2"),
        "G-Avg": ("commonsense_qa", "truthfulqa", "theoremqa", "mmlu"),
    },
    n=1,
    max_tokens=2048,
)
TRACK2 = Suite(
    "track2",
    ("math500", "math_perturb_simple", "math_perturb_hard", "amc23", "aime24", "aime25"),
    {
        "M-Avg": ("math500", "math_perturb_simple", "math_perturb_hard"),
        "C-Avg": ("amc23", "aime24", "aime25"),
    },
    n=16,
    max_tokens=4096,
)
# Track I as the authors' scripts evaluate it (train_gsm8k.sh: val_kwargs.do_sample=False, the
# paper's hyper-parameter table: do_sample False): greedy, one response. The paper's text says
# T 0.6 (`track1`); docs/reproduce.md.
TRACK1_GREEDY = replace(TRACK1, name="track1_greedy", temperature=0.0, top_p=1.0)
SUITES = {s.name: s for s in (TRACK1, TRACK2, TRACK1_GREEDY)}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(
            f"unknown suite {name!r}; known: {', '.join(SUITES)} (or pass --datasets a,b,c)"
        )
    return SUITES[name]


def suite_for(datasets: list[str]) -> Suite | None:
    """The suite whose datasets include all of `datasets` (its averages apply), else None."""
    return next((s for s in SUITES.values() if set(datasets) <= set(s.datasets)), None)


def group_members(datasets: list[str]) -> dict[str, list[str]]:
    """The averages to report for the evaluated datasets: the suite's groups (members present), then Avg."""
    suite = suite_for(datasets)
    out: dict[str, list[str]] = {}
    if suite is not None:
        for g, members in suite.groups.items():
            present = [d for d in members if d in datasets]
            if present:
                out[g] = present
    out["Avg"] = list(datasets)
    return out
