# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper's datasets: canonical names, aliases, answer kind, where each can be had.

Three kinds of source, one per kind of user (see `loader.load_dataset`):
- the authors' verl parquet files (`verl_file`, relative to a data dir such
  as `data/clipo/`; `rows` is what the published file holds),
- the Hugging Face hub (`hub`: repo, config, split, row layout) for users
  with access -- the hub copies differ from the authors' (TruthfulQA and
  TheoremQA are not doubled, MMLU is the full 14k not the 2k subset),
- an offline reasoning-gym generator (`gym`) where one exists.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HubSpec:
    repo: str
    config: str | None
    split: str
    layout: str  # how rows map to records: "qa", "mc_list", "mc_labeled", "mc1", "theoremqa"


@dataclass(frozen=True)
class DatasetSpec:
    name: str  # canonical name
    label: str  # the paper's table column
    kind: str  # "math" | "mc"
    verl_file: str | None  # path under the data dir, the name the authors published it under
    rows: int | None  # rows of the authors' published file
    hub: HubSpec | None = None
    gym: str | None = None  # reasoning-gym generator name
    aliases: tuple[str, ...] = ()
    verl_renamed: tuple[str, ...] = ()  # other accepted names of that file (a copy renamed)

    @property
    def verl_files(self) -> tuple[str, ...]:
        """The names looked for under a data dir, the published one first (`loader.verl_path`)."""
        return (self.verl_file, *self.verl_renamed) if self.verl_file else ()


def _qa(repo, config, split):
    return HubSpec(repo, config, split, "qa")


SPECS: dict[str, DatasetSpec] = {
    s.name: s
    for s in [
        # Track I (paper Table "Track I")
        DatasetSpec(
            "gsm8k",
            "GSM8K",
            "math",
            "test/gsm8k.parquet",
            1319,
            _qa("openai/gsm8k", "main", "test"),
            aliases=("gsm",),
        ),
        DatasetSpec(
            "gsm_symbolic",
            "SYM",
            "math",
            "test/gsm_symbolic.parquet",
            5000,
            _qa("apple/GSM-Symbolic", "main", "test"),
            gym="gsm_symbolic",
            aliases=("sym", "gsm-symbolic"),
        ),
        DatasetSpec(
            "gsm_p1",
            "P1",
            "math",
            "test/gsm_p1.parquet",
            5000,
            _qa("apple/GSM-Symbolic", "p1", "test"),
            aliases=("p1", "gsm-p1"),
        ),
        DatasetSpec(
            "gsm_p2",
            "P2",
            "math",
            "test/gsm_p2.parquet",
            2500,
            _qa("apple/GSM-Symbolic", "p2", "test"),
            aliases=("p2", "gsm-p2"),
        ),
        DatasetSpec(
            "commonsense_qa",
            "cQA",
            "mc",
            "test/commonsense_qa.parquet",
            1221,
            HubSpec("tau/commonsense_qa", None, "validation", "mc_labeled"),
            aliases=("commonsenseqa", "cqa"),
        ),
        DatasetSpec(
            "truthfulqa",
            "tQA",
            "mc",
            "test/truthfulqa*2.parquet",  # "*2": doubled (the published name, `*` included)
            1634,
            HubSpec("truthfulqa/truthful_qa", "multiple_choice", "validation", "mc1"),
            aliases=("truthful_qa", "tqa"),
            verl_renamed=("test/truthfulqa.parquet",),
        ),
        DatasetSpec(
            "theoremqa",
            "thrmQA",
            "math",
            "test/theoremqa*2.parquet",  # "*2": doubled (the published name, `*` included)
            1494,
            HubSpec("TIGER-Lab/TheoremQA", None, "test", "theoremqa"),
            aliases=("thrmqa", "theorem_qa"),
            verl_renamed=("test/theoremqa.parquet",),
        ),
        DatasetSpec(
            "mmlu",
            "MMLU",
            "mc",
            "test/mmlu2k.parquet",
            2000,
            HubSpec("cais/mmlu", "all", "test", "mc_list"),
            aliases=("mmlu2k",),
        ),
        # Track II (paper Table "Track II")
        DatasetSpec(
            "math500",
            "Math",
            "math",
            "test/math.parquet",
            500,
            _qa("HuggingFaceH4/MATH-500", None, "test"),
            aliases=("math", "math-500"),
        ),
        DatasetSpec(
            "math_perturb_simple",
            "Math_S",
            "math",
            "test/math_perturb_simple.parquet",
            279,
            aliases=("math_s", "math-perturb-simple"),
        ),
        DatasetSpec(
            "math_perturb_hard",
            "Math_H",
            "math",
            "test/math_perturb_hard.parquet",
            279,
            aliases=("math_h", "math-perturb-hard"),
        ),
        DatasetSpec(
            "amc23",
            "AMC",
            "math",
            "test/amc.parquet",
            83,
            _qa("math-ai/amc23", None, "test"),
            aliases=("amc",),
        ),
        DatasetSpec(
            "aime24",
            "AIME",
            "math",
            "test/aime.parquet",
            30,
            _qa("HuggingFaceH4/aime_2024", None, "train"),
            aliases=("aime", "aime2024"),
        ),
        DatasetSpec(
            "aime25",
            "AIME25",
            "math",
            "test/aime2025.parquet",
            30,
            _qa("math-ai/aime25", None, "test"),
            aliases=("aime2025",),
        ),
        # Training sets (Track I: GSM8K train; Track II: MATH 7.5k, ground truth = last box of the solution)
        DatasetSpec(
            "gsm8k_train",
            "GSM8K-train",
            "math",
            "train/gsm8k.parquet",
            7473,
            _qa("openai/gsm8k", "main", "train"),
        ),
        DatasetSpec(
            "math_train",
            "MATH-train",
            "math",
            "train/math75.parquet",
            7500,
            _qa("DigitalLearningGmbH/MATH-lighteval", None, "train"),
            aliases=("math75",),
        ),
        # Offline CPU task (reasoning-gym), not in the paper
        DatasetSpec(
            "basic_arithmetic",
            "Arith",
            "math",
            None,
            None,
            gym="basic_arithmetic",
            aliases=("arithmetic",),
        ),
    ]
}

_ALIASES = {a: s.name for s in SPECS.values() for a in (s.name, *s.aliases)}


def canonical_name(name: str) -> str:
    """`MMLU2k` -> `mmlu`, `aime` -> `aime24`, ...; ValueError naming the known datasets otherwise."""
    key = name.strip().lower().replace(" ", "_")
    if key not in _ALIASES:
        raise ValueError(
            f"unknown dataset {name!r}; known: {', '.join(sorted(SPECS))} "
            f"(aliases: {', '.join(sorted(set(_ALIASES) - set(SPECS)))})"
        )
    return _ALIASES[key]


def get_spec(name: str) -> DatasetSpec:
    return SPECS[canonical_name(name)]
