# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One entry point for every dataset and source: `load_dataset(name, source=..., ...) -> list[Record]`.

source:
- None: the authors' file `spec.verl_file` under `data_dir` (or $CLIPO_DATA_DIR);
- a path: a .parquet / .jsonl file, or a directory holding the authors' layout;
- "hf" / "hf:repo[:config][@split]": the Hugging Face hub;
- "gym": the reasoning-gym generator (gsm_symbolic, basic_arithmetic).
A dataset that cannot be found raises FileNotFoundError saying how to get it.
`limit` takes a fixed random subset (seeded, in source order), the same every time.
"""

from __future__ import annotations

import os
from pathlib import Path

from clipo_megatron.data.records import Record
from clipo_megatron.data.registry import DatasetSpec, get_spec

DATA_DIR_ENV = "CLIPO_DATA_DIR"


def how_to_get(spec: DatasetSpec) -> str:
    """The ways to obtain a dataset, for error messages and docs."""
    ways = []
    if spec.verl_file:
        ways.append(
            f"the authors' parquet (Qwen-Applications/CLIPO, folder data/): --data-dir DIR with DIR/"
            f"{spec.verl_file}, or ${DATA_DIR_ENV}"
        )
    ways.append(
        f"a local file: --source {spec.name}=/path/file.jsonl|.parquet (question/answer rows)"
    )
    if spec.hub:
        ways.append(
            f"the Hugging Face hub: --source {spec.name}=hf ({spec.hub.repo}; needs `datasets` and access)"
        )
    if spec.gym:
        ways.append(f"offline: --source {spec.name}=gym (reasoning-gym {spec.gym}, with --limit)")
    return "; ".join(ways)


def _candidates(d: Path, spec: DatasetSpec) -> list[Path]:
    """Where a dataset's parquet may sit under `d`: each accepted name (the published one
    first), in the authors' train/ test/ layout, then flat in `d`."""
    return [c for f in spec.verl_files for c in (d / f, d / Path(f).name)]


def verl_path(name: str, data_dir: str | Path | None = None) -> Path:
    """The authors' file of dataset `name` under `data_dir` (default $CLIPO_DATA_DIR, else
    data/clipo): the first accepted name that exists, else the published name (for the caller's
    "does not exist" line). The recipes' `${clipo_data:<name>}` resolves through this."""
    spec = get_spec(name)
    if not spec.verl_file:
        raise ValueError(
            f"{spec.name} has no file among the authors' data (Qwen-Applications/CLIPO)"
        )
    d = Path(data_dir or os.environ.get(DATA_DIR_ENV) or "data/clipo")
    return next((c for c in _candidates(d, spec) if c.is_file()), d / spec.verl_file)


def _resolve_dir(d: Path, spec: DatasetSpec) -> Path:
    for cand in _candidates(d, spec):
        if cand.is_file():
            return cand
    raise FileNotFoundError(
        f"{spec.name}: {d} has none of {', '.join(spec.verl_files)}. Get it from {how_to_get(spec)}"
    )


def subset(records: list[Record], limit: int | None, seed: int = 0) -> list[Record]:
    """`limit` records drawn without replacement with `seed`, kept in source order (all if limit is None/<=0)."""
    if not limit or limit <= 0 or limit >= len(records):
        return records
    import numpy as np

    keep = np.sort(np.random.default_rng(seed).choice(len(records), size=limit, replace=False))
    return [records[i] for i in keep]


def load_dataset(
    name: str,
    source: str | None = None,
    *,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    subset_seed: int = 0,
    gen_seed: int = 0,
) -> list[Record]:
    """Records of dataset `name` (canonical or alias) from `source`; see the module docstring."""
    spec = get_spec(name)
    if source == "gym":
        from clipo_megatron.data.gym import load_gym

        return load_gym(spec, int(limit or 0), gen_seed)
    if source is not None and (source in ("hf", "hub") or source.startswith("hf:")):
        from clipo_megatron.data.hub import load_hub

        records = load_hub(source, spec)
    else:
        if source is not None:
            p = Path(source)
            if not p.exists():
                raise FileNotFoundError(
                    f"{spec.name}: {p} does not exist. Get the data from {how_to_get(spec)}"
                )
        else:
            d = data_dir or os.environ.get(DATA_DIR_ENV)
            if not d or not spec.verl_file:
                raise FileNotFoundError(
                    f"{spec.name}: no source given and no data dir. Get it from {how_to_get(spec)}"
                )
            p = Path(d)
            if not p.is_dir():
                raise FileNotFoundError(
                    f"{spec.name}: data dir {p} does not exist. Get it from {how_to_get(spec)}"
                )
        path = _resolve_dir(p, spec) if p.is_dir() else p
        from clipo_megatron.data.files import load_file

        records = load_file(path, spec)
    return subset(records, limit, subset_seed)
