# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A name -> entry registry, as verl keeps its policy losses: the policy objectives and the
contrastive losses are each one, so adding one is one `register` call and a bad name is one
error naming the choices and the key to set."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


class Registry(dict[str, T], Generic[T]):
    """A dict of entries by their `name`, that refuses a second entry of a name.

    kind: what an entry is ("objective"); unknown: the error for a name not registered, with
    `{name}` and `{choices}` to fill in (it says which key to set).
    """

    def __init__(self, kind: str, unknown: str):
        super().__init__()
        self.kind, self.unknown = kind, unknown

    def register(self, entry: T) -> T:
        """Add `entry` under its name (name clashes are errors); returns it."""
        if entry.name in self:
            raise ValueError(f"{self.kind} {entry.name!r} is already registered")
        self[entry.name] = entry
        return entry

    def lookup(self, name: str) -> T:
        """The entry `name`, or one ValueError naming the choices."""
        try:
            return self[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name from a hostile config
            raise ValueError(self.unknown.format(name=name, choices=sorted(self))) from None
