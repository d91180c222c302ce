# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO's verdict on every GRPO Megatron recipe of a NeMo-RL checkout.

Each recipe is taken as a user takes it: a two-line overlay listing the recipe and the CLIPO
mixin in `defaults:` (`clipo_megatron:clipo.yaml`), then the preflight a `--validate-only
--no-cluster-env` run makes. The verdict is `accepted` or `refused: <key>`, the key the first
problem line names; beside it, each model family and feature of the recipe with a check mark
where CLIPO has run with it (and the test) and a cross where it has not (`families.py`).
docs/nemo_rl_recipes.md holds the table for the newest supported NeMo-RL and a test holds
every row of it; on your own checkout:

    python -m clipo_megatron.nemo_rl.guard.recipe_verdicts --nemo-rl-src /path/to/RL
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from clipo_megatron.nemo_rl.guard.families import record as family_record
from clipo_megatron.nemo_rl.guard.preflight import preflight
from clipo_megatron.nemo_rl.guard.recipes import CLIPO_PREFIX, load_recipe
from clipo_megatron.nemo_rl.port.loops import loop_of
from clipo_megatron.nemo_rl.port.master_config import dotted_get

RECIPES = "examples/configs/recipes/llm"
MIXIN = f"{CLIPO_PREFIX}clipo.yaml"


@dataclass(frozen=True)
class Verdict:
    recipe: str  # the file name under examples/configs/recipes/llm
    loop: str  # the NeMo-RL loop it asks for
    ep: int  # expert_model_parallel_size (> 1: an MoE layout)
    verdict: str  # "accepted" or "refused: <key>"
    line: str  # the first problem line ("" when accepted)
    record: str = ""  # its families and features, each ✓ (CLIPO ran with it, in which test) or ✗

    def row(self) -> str:
        return f"| `{self.recipe}` | {self.loop} | {self.ep} | {self.verdict} | {self.record} |"


def grpo_megatron_recipes(src: Path) -> list[Path]:
    return sorted((src / RECIPES).glob("grpo-*megatron*.yaml"))


def overlay(recipe: Path, folder: Path) -> Path:
    """The user's file: NeMo-RL's recipe, then CLIPO's mixin."""
    path = folder / recipe.name
    path.write_text(f"defaults:\n  - {recipe.resolve()}\n  - {MIXIN}\n", encoding="utf-8")
    return path


def key_of(problem: str) -> str:
    """The key a problem line starts with (`a.b.c=...: ...` or `a.b.c reads ...`)."""
    match = re.match(r"[A-Za-z_][\w.\[\]]*", problem)
    return match.group(0) if match else problem.split(":")[0]


def verdict_of(recipe: Path, folder: Path) -> Verdict:
    path = overlay(recipe, folder)
    report = preflight(path, [], cluster_env=False)
    loop, ep, ran = "?", 1, ""
    if report.config is not None:
        ran = family_record(report.config)
        loop = loop_of(report.config).name.split(" ")[0]
        ep = int(
            dotted_get(report.config, "policy.megatron_cfg.expert_model_parallel_size", 1) or 1
        )
    else:  # refused before the config resolved: read the loop from the unresolved recipe
        raw = load_recipe(path, resolve=False)
        loop = loop_of(raw).name.split(" ")[0]
    if report.ok:
        return Verdict(recipe.name, loop, ep, "accepted", "", ran)
    first = report.problems[0]
    return Verdict(recipe.name, loop, ep, f"refused: {key_of(first)}", first, ran)


def sweep(src: Path) -> Iterator[Verdict]:
    """Every GRPO Megatron recipe's verdict (NEMO_RL_ROOT set to `src` for `nemo_rl:` parents)."""
    os.environ["NEMO_RL_ROOT"] = str(src)
    with tempfile.TemporaryDirectory() as folder:
        for recipe in grpo_megatron_recipes(src):
            yield verdict_of(recipe, Path(folder))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nemo-rl-src", type=Path, required=True, help="a NeMo-RL checkout")
    p.add_argument("--lines", action="store_true", help="print each refusal's line under its row")
    args = p.parse_args(argv)
    if not (args.nemo_rl_src / RECIPES).is_dir():
        p.error(f"{args.nemo_rl_src} has no {RECIPES}: point --nemo-rl-src at a NeMo-RL checkout")
    print("| recipe | loop | EP | verdict | CLIPO has run with |\n|---|---|---|---|---|")
    for v in sweep(args.nemo_rl_src):
        print(v.row())
        if args.lines and v.line:
            print(f"<!-- {v.line} -->")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
