# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A table's runs as the tasks of a Slurm job array (`slurm/paper_table.sh`).

Task i is the table's i-th trained row (the base model's rows are scored, not trained: their
`clipo-megatron eval` line is printed instead). One array per track, since a Track II run takes
two nodes (as `slurm/track2_qwen7b.sh`) and a Track I run one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clipo_megatron.paper.recipes import recipe_path
from clipo_megatron.paper.scores import MODELS, PAPER_SCORES, row_settings, tables

NODES = {"track1": 1, "track2": 2}  # the track scripts' #SBATCH --nodes
EVAL_SUITE = {"track1": "track1_greedy", "track2": "track2"}  # docs/reproduce.md


@dataclass(frozen=True)
class Task:
    index: int
    track: str
    nodes: int
    row: str
    recipe: Path


def table_tasks(table: str, path: Path = PAPER_SCORES) -> tuple[list[Task], list[str]]:
    """(the array's tasks, the rows no run trains with the command that scores them);
    ValueError naming the tables for an unknown one."""
    known = tables(path)
    if table not in known:
        raise ValueError(f"no table {table!r}; tables: {', '.join(known)}")
    tasks: list[Task] = []
    untrained: list[str] = []
    for row in known[table]["rows"]:
        s = row_settings(table, row, path)
        recipe = recipe_path(s)
        if recipe is None:
            untrained.append(
                f"{row}: the base model, no run; score it with clipo-megatron eval --suite "
                f"{EVAL_SUITE[s.track]} --grader paper --model {MODELS[s.model][0]}"
            )
            continue
        tasks.append(Task(len(tasks), s.track, NODES[s.track], row, recipe))
    return tasks, untrained


def array_lines(
    table: str, root: Path, seeds: tuple[int, ...] = (), path: Path = PAPER_SCORES
) -> list[str]:
    """Tab-separated `index track nodes recipe overrides row` per task (recipe relative to
    `root`; overrides `-` for none), then a `#` line per untrained row: what
    `slurm/paper_table.sh` reads. With seeds, each row is one task per seed (index
    row * len(seeds) + k), with `grpo.seed` and a checkpoint and log folder of its own."""
    tasks, untrained = table_tasks(table, path)
    lines = []
    for t in tasks:
        recipe = str(t.recipe.relative_to(root))
        for k, seed in enumerate(seeds or (None,)):
            overrides = "-"
            if seed is not None:
                run = f"reproduce/{t.recipe.stem}/seed{seed}"
                overrides = (
                    f"grpo.seed={seed} checkpointing.checkpoint_dir=results/{run} "
                    f"logger.log_dir=logs/{run}"
                )
            index = t.index * len(seeds) + k if seeds else t.index
            lines.append("\t".join([str(index), t.track, str(t.nodes), recipe, overrides, t.row]))
    return lines + [f"# {u}" for u in untrained]
