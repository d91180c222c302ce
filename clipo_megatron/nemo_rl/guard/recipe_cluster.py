# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What a Slurm job needs from a recipe, read before anything is submitted or started.

    python -m clipo_megatron.nemo_rl.guard.recipe_cluster RECIPE [key=value ...]
        [--job-nodes N] [--job-gpus-per-node G]

- the nodes and GPUs per node: `cluster.num_nodes` and `cluster.gpus_per_node` through the
  recipe's `defaults:` chain and the overrides (the recipe loader, `recipes.py`), and which file
  (or override) set the node count;
- the files of that chain, so that a container sees each of them at the same path;
- whether the recipe reads CLIPO's parquet data: its `data:` section names
  `${oc.env:CLIPO_DATA_DIR,...}` (CLIPO's recipes do; NeMo-RL's read their own datasets).

It prints `key<TAB>value` lines for slurm/ (`nodes`, `gpus_per_node`, `nodes_from`,
`reads_clipo_data_dir`, one `file` line per file). Given the job's allocation it refuses a
mismatch: a recipe for 8 nodes in a 2-node job would otherwise train on 2 (slurm/ passes the
allocation to the driver). Every problem is one line on stderr, exit 2. Needs omegaconf only
(no torch, no NeMo-RL), so it runs on a login node and in the batch shell.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The data section reads CLIPO's parquet files through this variable (examples/configs/*.yaml).
DATA_DIR_ENV = "oc.env:CLIPO_DATA_DIR"


@dataclass(frozen=True)
class RecipeCluster:
    nodes: int  # cluster.num_nodes
    gpus_per_node: int  # cluster.gpus_per_node
    nodes_from: str  # where the node count was set, for messages
    files: tuple[Path, ...]  # the recipe and every parent it reads, parents first
    reads_clipo_data_dir: bool  # the data section names ${oc.env:CLIPO_DATA_DIR,...}


def _sets(path: Path, key: str) -> bool:
    """Whether the file itself (not its parents) sets the dotted key."""
    from omegaconf import OmegaConf

    node: Any = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _mentions(value: Any, text: str) -> bool:
    if isinstance(value, dict):
        return any(_mentions(v, text) for v in value.values())
    if isinstance(value, list):
        return any(_mentions(v, text) for v in value)
    return isinstance(value, str) and text in value


def _positive_int(conf: Any, key: str, recipe: Path) -> int:
    from omegaconf import OmegaConf

    value = OmegaConf.select(conf, key, default=None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{recipe}: {key} is {value!r} through its `defaults:` chain; a Slurm job needs a "
            f"positive number: set {key} in the recipe or pass {key}=N"
        )
    return value


def recipe_cluster(
    recipe: str | Path, overrides: list[str] | tuple[str, ...] = ()
) -> RecipeCluster:
    """The cluster a recipe asks for (ValueError, one line, when it cannot be read)."""
    from omegaconf import OmegaConf

    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    recipe = Path(recipe)
    chain: list[tuple[Path, str]] = []
    conf = OmegaConf.create(load_recipe(recipe, list(overrides), resolve=False, files=chain))
    nodes = _positive_int(conf, "cluster.num_nodes", recipe)
    gpus = _positive_int(conf, "cluster.gpus_per_node", recipe)
    given = [o for o in overrides if o.lstrip("+").startswith("cluster.num_nodes=")]
    if given:
        nodes_from = f"the override {given[-1]}"
    else:  # the last file of the merge order that sets it wins
        setter = next(p for p, _ in reversed(chain) if _sets(p, "cluster.num_nodes"))
        nodes_from = f"cluster.num_nodes in {setter}"
    data = OmegaConf.to_container(conf, resolve=False).get("data")  # type: ignore[union-attr]
    return RecipeCluster(
        nodes, gpus, nodes_from, tuple(p for p, _ in chain), _mentions(data, DATA_DIR_ENV)
    )


def allocation_problem(
    need: RecipeCluster, recipe: str | Path, *, nodes: int | None, gpus_per_node: int | None
) -> str | None:
    """One line when the job's allocation is not the recipe's cluster, else None."""
    if nodes is not None and nodes != need.nodes:
        return (
            f"[clipo] {recipe} asks for {need.nodes} nodes ({need.nodes_from}) but this job has "
            f"{nodes} (SLURM_JOB_NUM_NODES); submit it with `slurm/submit.sh {recipe}` (it passes "
            f"sbatch --nodes={need.nodes}), or pass cluster.num_nodes={nodes} to train on {nodes}"
        )
    if gpus_per_node is not None and gpus_per_node != need.gpus_per_node:
        return (
            f"[clipo] {recipe} asks for {need.gpus_per_node} GPUs per node (cluster.gpus_per_node)"
            f" but this job has {gpus_per_node} (GPUS_PER_NODE, else SLURM_GPUS_ON_NODE); submit "
            f"it with `slurm/submit.sh {recipe}`, or pass cluster.gpus_per_node={gpus_per_node}"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m clipo_megatron.nemo_rl.guard.recipe_cluster",
        description="Print the nodes, GPUs per node, files and data a recipe needs of Slurm.",
    )
    p.add_argument("recipe", type=Path)
    p.add_argument("--job-nodes", type=int, help="the job's node count: refuse a mismatch")
    p.add_argument("--job-gpus-per-node", type=int, help="the job's GPUs per node: likewise")
    args, overrides = p.parse_known_args(argv)
    try:
        import omegaconf  # noqa: F401
    except ImportError:
        print(
            f"[clipo] {sys.executable} has no omegaconf, which reading the recipe needs: "
            "pip install omegaconf, or set CLIPO_PYTHON to a Python that has it",
            file=sys.stderr,
        )
        return 2
    try:
        need = recipe_cluster(args.recipe, overrides)
    except Exception as e:  # noqa: BLE001 - a recipe that does not load: its one line, exit 2
        msg = " ".join(str(e).split())
        named = str(args.recipe) in msg or str(args.recipe.resolve()) in msg
        print(f"[clipo] {msg}" if named else f"[clipo] {args.recipe}: {msg}", file=sys.stderr)
        return 2
    problem = allocation_problem(
        need, args.recipe, nodes=args.job_nodes, gpus_per_node=args.job_gpus_per_node
    )
    if problem:
        print(problem, file=sys.stderr)
        return 2
    print(f"nodes\t{need.nodes}\ngpus_per_node\t{need.gpus_per_node}")
    print(f"nodes_from\t{need.nodes_from}\nreads_clipo_data_dir\t{int(need.reads_clipo_data_dir)}")
    for f in need.files:
        print(f"file\t{f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
