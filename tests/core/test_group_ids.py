# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Group ids of any hashable type (verl's str `uid`), mapped the same way on every rank."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clipo_megatron.core import (
    CLIPOConfig,
    GroupLayout,
    as_group_ids,
    contrastive_rewards,
    dynamic_sampling_filter,
    group_advantages,
    group_contrastive_loss,
)

# verl-style uids, shuffled: sorted unique = ["u-a", "u-b", "u-c"] -> 0, 1, 2.
UIDS = ["u-b", "u-a", "u-c", "u-a", "u-b", "u-c", "u-a", "u-b", "u-c"]
INTS = [1, 0, 2, 0, 1, 2, 0, 1, 2]


def test_str_ids_map_to_their_sorted_unique_index():
    assert as_group_ids(UIDS).tolist() == INTS
    assert as_group_ids(np.array(UIDS)).tolist() == INTS  # numpy <U4
    assert as_group_ids(np.array(UIDS, dtype=object)).tolist() == INTS
    assert as_group_ids((("p", 1), ("p", 0), ("p", 1))).tolist() == [1, 0, 1]  # tuples
    # Integer ids keep their values (the positive draw is keyed by them).
    assert as_group_ids([7, 3, 7]).tolist() == [7, 3, 7]
    assert as_group_ids(np.array([7, 3], dtype=np.int32)).tolist() == [7, 3]
    ids = torch.tensor([4, 4, 9])
    assert as_group_ids(ids) is ids


def test_each_rank_maps_its_rows_like_the_whole_batch():
    # Rank 0 holds ["u-c", "u-a"], rank 1 ["u-b", "u-d"]; mapped over the union
    # (sorted: a, b, c, d) they get 2, 0 and 1, 3, not 1, 0 and 0, 1 each.
    every = ["u-c", "u-a", "u-b", "u-d"]
    assert as_group_ids(["u-c", "u-a"], universe=every).tolist() == [2, 0]
    assert as_group_ids(["u-b", "u-d"], universe=every).tolist() == [1, 3]
    with pytest.raises(ValueError, match="not in the `universe`"):
        as_group_ids(["u-z"], universe=every)


@pytest.mark.parametrize(
    "bad,match",
    [
        (["u-a", 1, "u-a"], r"mix types \['int', 'str'\]"),
        ([0.0, 1.0], "float"),
        ([True, False], "bool"),
        ([["u-a"], ["u-b"]], "hashable"),
        ("u-a", "sequence of ids"),
    ],
)
def test_bad_ids_are_value_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        as_group_ids(bad)


def test_loss_rewards_and_advantages_accept_str_uids():
    # Old code: AttributeError: 'list' object has no attribute 'dim'.
    gen = torch.Generator().manual_seed(0)
    emb = torch.randn(9, 8, generator=gen, dtype=torch.float64)
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 0, 1, 1])
    cfg = CLIPOConfig()
    for ids in (UIDS, np.array(UIDS)):
        a = group_contrastive_loss(emb, correct, ids, cfg, step=2)
        b = group_contrastive_loss(emb, correct, torch.tensor(INTS), cfg, step=2)
        assert torch.equal(a.per_sample_loss, b.per_sample_loss)
        assert torch.equal(a.positive_index, b.positive_index)
        assert torch.equal(contrastive_rewards(a, cfg), contrastive_rewards(b, cfg))
    r = correct.double()
    assert torch.equal(group_advantages(r, UIDS), group_advantages(r, torch.tensor(INTS)))
    # Groups: a = rows 1,3,6 -> r 1,1,0; b = rows 0,4,7 -> 1,0,1; c = rows 2,5,8 -> 0,1,1.
    keep = dynamic_sampling_filter(r, UIDS)
    assert keep.keep.all() and keep.num_groups == 3
    lay = GroupLayout.from_group_ids(UIDS)
    assert lay.group_keys.tolist() == [0, 1, 2] and lay.sizes.tolist() == [3, 3, 3]
