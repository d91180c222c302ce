# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Ragged group layout: rollouts -> padded [N, G_max] blocks, by group id.

DAPO dynamic sampling and filtering leave groups of uneven size, and sequence
packing reorders rollouts, so group membership is always an explicit group id
per rollout, never "every G rows". Rows inside a group are ordered by a
canonical key (the sample id), which makes everything computed per slot
independent of how the batch was sharded or permuted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import torch

# Group ids as they arrive: an int tensor, or a sequence / numpy array of
# hashable ids (verl's `uid` is a str per rollout).
GroupIds = torch.Tensor | Sequence[Any]


def as_group_ids(
    group_ids: GroupIds, *, universe: Iterable[Any] | None = None, device=None
) -> torch.Tensor:
    """[B] group ids of any hashable type -> [B] long tensor, the same on every rank.

    Integer ids (tensor, numpy or Python ints) keep their values, so the positive
    draw keyed by them is unchanged. Other ids (str uids, tuples, ...) become their
    index in the sorted unique ids of `universe` (default: `group_ids` itself).
    A rank that holds only part of the batch must pass the ids of the whole batch
    as `universe`, or its indices would not match the other ranks'. `device` places
    a new tensor; a tensor passed in stays where it is.
    """
    if isinstance(group_ids, torch.Tensor):
        return group_ids
    if hasattr(group_ids, "dtype") and hasattr(group_ids, "tolist"):  # numpy array
        if group_ids.dtype.kind in "iu":
            return torch.as_tensor(group_ids.astype("int64"), device=device)  # type: ignore[attr-defined]
        ids = group_ids.tolist()
    elif isinstance(group_ids, (str, bytes)) or not isinstance(group_ids, Iterable):
        raise ValueError(
            f"group_ids must be a [B] sequence of ids (one per rollout), got {type(group_ids).__name__}"
        )
    else:
        ids = list(group_ids)
    bad = [x for x in ids if isinstance(x, (bool, float))]
    if bad:
        raise ValueError(
            f"group ids must be ints or hashable labels such as str, got {bad[:4]} "
            f"({type(bad[0]).__name__}); map them to int or str ids first"
        )
    if all(isinstance(x, Integral) for x in ids):
        return torch.tensor([int(x) for x in ids], dtype=torch.long, device=device)
    vocab = _sorted_unique(ids if universe is None else list(universe))
    index = {x: i for i, x in enumerate(vocab)}
    missing = [x for x in ids if x not in index]
    if missing:
        raise ValueError(
            f"group ids {missing[:4]} are not in the `universe` passed to as_group_ids; "
            "pass the ids of the whole batch"
        )
    return torch.tensor([index[x] for x in ids], dtype=torch.long, device=device)


def _kind(x: Any) -> str:
    """Type name for the one-type rule; numpy's str_ / bytes_ count as str / bytes."""
    for t, name in ((str, "str"), (bytes, "bytes"), (Integral, "int")):
        if isinstance(x, t):
            return name
    return type(x).__name__


def _sorted_unique(ids: list[Any]) -> list[Any]:
    """Sorted distinct ids; one type only, so the order is the same in every process."""
    types = sorted({_kind(x) for x in ids})
    if len(types) > 1:
        raise ValueError(
            f"group ids mix types {types}: use one type for every rollout "
            "(e.g. str(uid) for all, or int ids for all)"
        )
    try:
        return sorted(set(ids))
    except TypeError as e:  # unhashable (list, dict) or unorderable values
        raise ValueError(
            f"group ids must be hashable and orderable (int, str, tuple of those), got "
            f"{types[0] if types else '?'} ({e})"
        ) from None


class _GatherRows(torch.autograd.Function):
    """x[index] whose backward is a gather, not a scatter-add.

    Every batch row sits in exactly one slot, so the gradient of row b is the
    gradient of its slot: `grad.flatten(0, 1)[flat_slot_of]`. Padding slots
    (which duplicate row 0) get no gradient, as they must. This avoids the
    serial accumulate of advanced-indexing backward on [B, d].
    """

    @staticmethod
    def forward(ctx, x, index, flat_slot_of):  # noqa: D401
        ctx.save_for_backward(flat_slot_of)
        return x[index]

    @staticmethod
    def backward(ctx, grad):
        (flat_slot_of,) = ctx.saved_tensors
        return grad.flatten(0, 1)[flat_slot_of], None, None


@dataclass(frozen=True)
class GroupLayout:
    """Index maps between a flat batch [B] and padded group blocks [N, G_max]."""

    group_keys: torch.Tensor  # [N] the distinct group ids, ascending
    sizes: torch.Tensor  # [N] rollouts per group
    index: torch.Tensor  # [N, G_max] batch row of each slot, -1 for padding
    slot_valid: torch.Tensor  # [N, G_max] bool
    group_of: torch.Tensor  # [B] group number 0..N-1 of each row
    slot_of: torch.Tensor  # [B] slot of each row inside its group
    _identity: bool = False

    @property
    def num_groups(self) -> int:
        return int(self.sizes.numel())

    @property
    def max_size(self) -> int:
        return int(self.index.shape[1])

    @classmethod
    def from_group_ids(
        cls,
        group_ids: torch.Tensor,
        *,
        sort_keys: torch.Tensor | None = None,
        max_group_size: int | None = None,
    ) -> GroupLayout:
        """Build the layout. `sort_keys` [B] orders rows within a group (default: batch order).

        group_ids: [B] ints, or any hashable ids (see `as_group_ids`).
        """
        group_ids = _checked_group_ids(as_group_ids(group_ids))
        device = group_ids.device
        b = group_ids.numel()
        gids = group_ids.long()
        keys, inverse, counts = torch.unique(gids, return_inverse=True, return_counts=True)
        if max_group_size is not None and int(counts.max()) > max_group_size:
            worst = int(counts.argmax())
            raise ValueError(
                f"group id {int(keys[worst])} has {int(counts[worst])} rollouts, more than "
                f"max_group_size={max_group_size}: group ids do not fit the rollout layout"
            )
        order = _group_order(inverse, sort_keys)  # [B] rows by group, then by sort key
        starts = torch.cumsum(counts, 0) - counts  # [N]
        slot_sorted = torch.arange(b, device=device) - starts[inverse[order]]
        slot_of = torch.empty_like(slot_sorted)
        slot_of[order] = slot_sorted
        g_max = int(counts.max())
        index = torch.full((keys.numel(), g_max), -1, dtype=torch.long, device=device)
        index[inverse, slot_of] = torch.arange(b, device=device)
        identity = bool(counts.min() == g_max) and torch.equal(
            index.flatten(), torch.arange(b, device=device)
        )
        return cls(
            _identity=identity,
            group_keys=keys,
            sizes=counts,
            index=index,
            slot_valid=index >= 0,
            group_of=inverse,
            slot_of=slot_of,
        )

    def restricted_to(self, member: torch.Tensor) -> GroupLayout:
        """The same blocks with the rows outside `member` [B] bool turned into padding slots:
        whatever reads `slot_valid` (pairs, anchors, the validity rule) sees each group as its
        members alone, and slot order, so the positive draw, is that of the full layout."""
        keep = self.to_padded(member.bool(), fill=False)  # [N, G_max]
        return dataclasses.replace(self, slot_valid=self.slot_valid & keep)

    def to_padded(self, x: torch.Tensor, fill: float | bool | int | None = 0) -> torch.Tensor:
        """[B, ...] -> [N, G_max, ...], padding slots set to `fill`. Differentiable.

        fill=None leaves copies of row 0 in padding slots (no extra pass over x):
        for callers that mask padding out downstream, e.g. the embeddings.
        """
        if self.is_identity:  # rows already grouped, in order, equal sizes: a free view
            return x.view(*self.index.shape, *x.shape[1:])
        out = _GatherRows.apply(x, self.index.clamp_min(0), self._flat_slot_of)  # [N, G_max, ...]
        if fill is None or bool(self.slot_valid.all()):
            return out
        mask = self.slot_valid.view(*self.slot_valid.shape, *([1] * (x.dim() - 1)))
        return torch.where(mask, out, torch.as_tensor(fill, dtype=x.dtype, device=x.device))

    @property
    def is_identity(self) -> bool:
        """True when slot (n, g) holds batch row n * G_max + g (the "every G rows" case)."""
        return self._identity

    @property
    def _flat_slot_of(self) -> torch.Tensor:
        return self.group_of * self.max_size + self.slot_of  # [B]

    def from_padded(self, y: torch.Tensor) -> torch.Tensor:
        """[N, G_max, ...] -> [B, ...] (inverse of `to_padded`)."""
        if self.is_identity:
            return y.reshape(-1, *y.shape[2:])
        return y[self.group_of, self.slot_of]


def _checked_group_ids(group_ids: torch.Tensor) -> torch.Tensor:
    """[B] integer ids >= 0, or one ValueError naming what is wrong."""
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must be 1-D [B], got shape {tuple(group_ids.shape)}")
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    if group_ids.numel() == 0:
        raise ValueError("group_ids is empty: a CLIPO batch needs at least one rollout")
    if bool((group_ids < 0).any()):
        bad = torch.nonzero(group_ids < 0).flatten()[:8].tolist()
        raise ValueError(f"group_ids must be >= 0; negative ids at rows {bad}")
    return group_ids


def _group_order(inverse: torch.Tensor, sort_keys: torch.Tensor | None) -> torch.Tensor:
    """[B] row order: by group (inverse [B], the group index of each row), within a group by
    `sort_keys` [B] (unique per group), else in batch order."""
    if sort_keys is None:
        return torch.argsort(inverse, stable=True)
    if sort_keys.shape != inverse.shape:
        raise ValueError(
            f"sort_keys shape {tuple(sort_keys.shape)} != group_ids shape {tuple(inverse.shape)}"
        )
    order = torch.argsort(sort_keys.long(), stable=True)
    order = order[torch.argsort(inverse[order], stable=True)]
    sk = sort_keys.long()[order]
    same_group = inverse[order][1:] == inverse[order][:-1]
    if bool((same_group & (sk[1:] == sk[:-1])).any()):
        raise ValueError("sort_keys (sample ids) must be unique within each group")
    return order
