# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Naming a misspelt config key with the one that was probably meant.

A typo in a knob (`clipo.method.temprature`) must be one line that names the key the user meant,
not a list of every valid key or advice to add the typo as a new key.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(key: str, known: Iterable[str]) -> str | None:
    """The known key `key` most likely misspells (None when nothing is close)."""
    match = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def unknown_keys_line(prefix: str, unknown: Iterable[str], known: Iterable[str]) -> str:
    """`unknown key clipo.method.temprature (did you mean clipo.method.temperature?)` for the keys
    under `prefix` (e.g. "clipo.method."); the valid keys are listed only when one unknown key
    resembles none of them."""
    known = sorted(known)
    named, unmatched = [], False
    for key in sorted(unknown):
        guess = closest(key, known)
        unmatched |= guess is None
        named.append(f"{prefix}{key}" + (f" (did you mean {prefix}{guess}?)" if guess else ""))
    valid = f"; valid {prefix.rstrip('.')} keys: {', '.join(known)}" if unmatched else ""
    return f"unknown key{'s' if len(named) > 1 else ''} {', '.join(named)}{valid}"
