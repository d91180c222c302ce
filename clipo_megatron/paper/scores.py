# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper's experiment tables and the settings of each printed row.

`paper_scores.json` holds, per table, the paper's label and lines, its columns (this project's
dataset names and averages), the settings every row shares and, per row, what differs from them
(`settings`, merged here into `Settings`). Rows whose settings the paper does not print (the
tau of most +CLIPO rows) take the paper's stated default; the table's `notes` say which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path

PAPER_SCORES = Path(__file__).resolve().parents[2] / "examples/configs/reproduce/paper_scores.json"

TRACKS = ("track1", "track2")
MODELS = {  # short id -> (Hugging Face name, the track it is the default of, or None)
    "qwen3b": ("Qwen/Qwen2.5-3B-Instruct", "track1"),
    "qwen7b": ("Qwen/Qwen2.5-7B-Instruct", "track2"),
    "ds7b": ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", None),
    "llama8b": ("meta-llama/Llama-3.1-8B-Instruct", None),
}
OBJECTIVES = ("grpo", "gspo", "dapo", "gmpo")
LOSSES = ("infonce", "supcon", "softnn")


_DEFAULTS = {"loss": "infonce", "tau": 0.05, "fixed_head": False}


@dataclass(frozen=True)
class Settings:
    """What a printed row ran: the run a recipe reproduces (`trained` False: the base model)."""

    track: str
    model: str = ""  # "" -> the track's own model
    trained: bool = True
    objective: str = "grpo"
    clipo: bool = True
    loss: str = "infonce"
    tau: float = 0.05
    group_size: int = 16
    fixed_head: bool = False

    def __post_init__(self) -> None:
        if not self.model:
            default = next(m for m, (_, track) in MODELS.items() if track == self.track)
            object.__setattr__(self, "model", default)
        if not (self.clipo and self.trained):  # no head: its knobs are moot; normalised so
            for name in ("loss", "tau", "fixed_head"):  # rows that ran the same thing compare equal
                object.__setattr__(self, name, _DEFAULTS[name])
        checks = {
            "track": self.track in TRACKS,
            "model": self.model in MODELS,
            "objective": self.objective in OBJECTIVES,
            "loss": self.loss in LOSSES,
            "tau": isinstance(self.tau, float) and self.tau > 0,
            "group_size": isinstance(self.group_size, int) and self.group_size >= 2,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"row settings {self}: bad {bad} (see paper_scores.json's schema)")


SETTING_KEYS = frozenset(f.name for f in fields(Settings))


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))["tables"]


def tables(path: Path = PAPER_SCORES) -> dict:
    """{table key: table} as paper_scores.json holds them."""
    return _load(str(path))


def row_settings(table: str, row: str, path: Path = PAPER_SCORES) -> Settings:
    """The merged settings of one printed row; ValueError naming an unknown key."""
    tab = tables(path)[table]
    merged = {**tab["settings"], **tab["rows"][row].get("settings", {})}
    unknown = set(merged) - SETTING_KEYS
    if unknown:
        raise ValueError(
            f"{table}/{row}: unknown settings {sorted(unknown)}; known {sorted(SETTING_KEYS)}"
        )
    return replace(Settings(track=merged.pop("track")), **merged)


def all_rows(path: Path = PAPER_SCORES) -> list[tuple[str, str, Settings]]:
    """(table, row, settings) of every printed row, in the file's order."""
    return [
        (t, r, row_settings(t, r, path)) for t, tab in tables(path).items() for r in tab["rows"]
    ]
