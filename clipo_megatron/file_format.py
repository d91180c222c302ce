# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every file the project writes and reads back says its layout: `format_version`.

One layout per kind of file, and a reader reads only that one: a file of another version (or
none: not written by this project's current code) is one error naming the file and what to do,
never a guess at an older layout. Whoever changes a layout bumps its version beside the writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

VERSION_KEY = "format_version"


def stamped(payload: dict[str, Any], version: int) -> dict[str, Any]:
    """`payload` with its layout's version, as written."""
    return {VERSION_KEY: version, **payload}


def check_version(payload: Any, version: int, path: str | Path, fix: str) -> None:
    """ValueError unless `payload` (a file's top-level dict) is of layout `version`."""
    found = payload.get(VERSION_KEY) if isinstance(payload, dict) else None
    if found == version:
        return
    what = "no format version" if found is None else f"format version {found!r}"
    raise ValueError(f"{path} has {what}; this clipo_megatron reads version {version} only: {fix}")
