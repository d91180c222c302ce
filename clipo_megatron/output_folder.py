# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""An output folder is recognisably ours: a marker file says which command wrote it.

`train`, `compare` and `eval` write only into a folder that does not exist yet, is empty, or
holds their own marker (`clipo_megatron_output.json`, e.g. {"kind": "train"}). Anything else,
an HF model's folder with its `config.json`, a symlink to one, another command's output, is
refused in one line before a model loads: writing into it would replace its `config.json`
or drop a foreign `metrics.jsonl` line as "a torn last line".

Folders written before the marker existed are recognised by files only this project writes
(`LEGACY`), and get the marker on their next run.
"""

from __future__ import annotations

import json
from pathlib import Path

MARKER = "clipo_megatron_output.json"

# What each kind of folder is, for the message; and which kinds may share a folder.
KINDS = {
    "train": "a `clipo-megatron train` run",
    "compare": "a `clipo-megatron compare` output",
    "eval": "a `clipo-megatron eval` output",
    "eval-compare": "a `clipo-megatron eval compare` output",
    "heldout": "a `clipo-megatron eval --run/--config` output",
}
# Files (relative paths; `*` as in glob) that only a folder of that kind holds.
LEGACY = {
    "train": ("config_history.jsonl", "checkpoints/latest.pt", "run.lock"),
    "compare": ("compare.json", "*/*/seed*/config.json", "*/*/seed*/checkpoints/latest.pt"),
    "eval": ("run.json",),
    "eval-compare": ("compare.json",),
    "heldout": ("eval.json",),
}


def folder_kind(path: Path) -> str | None:
    """The kind its marker names, else the kind its legacy files show, else None."""
    marker = path / MARKER
    if marker.is_file():
        try:
            kind = json.loads(marker.read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            return None
        return kind if kind in KINDS else None
    for kind, files in LEGACY.items():
        if any(next(path.glob(f), None) is not None for f in files):
            return kind
    return None


def check_output_folder(path: str | Path, *, kinds: tuple[str, ...], key: str) -> None:
    """ValueError (one line, naming `key`) unless `path` is new, empty, or of one of `kinds`.

    Nothing is created. A symlink is judged by what it points at; a dangling one is refused."""
    p = Path(path)
    if p.is_symlink() and not p.exists():
        raise ValueError(f"{key}={p} is a symlink to nothing ({p.readlink()}): choose a folder")
    if not p.exists():
        return
    if not p.is_dir():
        raise ValueError(f"{key}={p} is a file, not a folder: choose a new or empty folder")
    kind = folder_kind(p)
    if kind in kinds:
        return
    entries = sorted(x.name for x in p.iterdir())
    if not entries:
        return
    what = KINDS[kind] if kind else "not an output of clipo-megatron"
    shown = ", ".join(entries[:4]) + (f" and {len(entries) - 4} more" if len(entries) > 4 else "")
    raise ValueError(
        f"{key}={p} already holds files ({shown}) and is {what}: nothing is written into "
        f"another folder's files; choose a new or empty folder for {KINDS[kinds[0]]}"
    )


def claim_output_folder(
    path: str | Path, *, kind: str, key: str, also: tuple[str, ...] = ()
) -> Path:
    """`check_output_folder` (of `kind`, or one of `also`), then create the folder and its
    marker (a folder that has one keeps it)."""
    p = Path(path)
    check_output_folder(p, kinds=(kind, *also), key=key)
    p.mkdir(parents=True, exist_ok=True)
    marker = p / MARKER
    if not marker.is_file():
        marker.write_text(json.dumps({"kind": kind}) + "\n")
    return p
