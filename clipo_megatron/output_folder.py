# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""An output folder is recognisably ours: a marker file says which command wrote it.

`train`, `compare` and `eval` write only into a folder that does not exist yet, is empty, or
holds their own marker (`clipo_megatron_output.json`, {"format_version": 1, "kind": "train"}).
Anything else, an HF model's folder with its `config.json`, a symlink to one, another command's
output, a marker of another format version, is refused in one line before a model loads:
writing into it would replace its `config.json` or drop a foreign `metrics.jsonl` line as "a
torn last line".
"""

from __future__ import annotations

import json
from pathlib import Path

from clipo_megatron.file_format import check_version, stamped

MARKER = "clipo_megatron_output.json"
MARKER_FORMAT = 1  # {format_version, kind}
# A train run locks its folder (runner/run_dir.py LOCK_NAME) before it writes the marker: the
# lock file alone is no one else's file (the lock itself then says whether a run holds it).
RUN_LOCK = "run.lock"

# What each kind of folder is, for the message; and which kinds may share a folder.
KINDS = {
    "train": "a `clipo-megatron train` run",
    "compare": "a `clipo-megatron compare` output",
    "eval": "a `clipo-megatron eval` output",
    "eval-compare": "a `clipo-megatron eval compare` output",
    "eval-paper": "a `clipo-megatron eval paper` output",
    "heldout": "a `clipo-megatron eval --run/--config` output",
}


def folder_kind(path: Path) -> str | None:
    """The kind its marker names, else None; ValueError for a marker of another format version
    (one layout is read: a folder an older version wrote is not guessed at)."""
    marker = path / MARKER
    if not marker.is_file():
        return None
    try:
        saved = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    check_version(saved, MARKER_FORMAT, marker, "choose a new or empty folder")
    kind = saved.get("kind")
    return kind if kind in KINDS else None


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
    try:
        kind = folder_kind(p)
    except ValueError as e:
        raise ValueError(f"{key}={p}: {e}") from None
    if kind in kinds:
        return
    entries = sorted(x.name for x in p.iterdir() if x.name != RUN_LOCK)
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
        marker.write_text(json.dumps(stamped({"kind": kind}, MARKER_FORMAT)) + "\n")
    return p
