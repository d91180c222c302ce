# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo.pool_last_token`: the capture pools y1..yT, or y1..y(T-1) as the authors' SGLang
states, in each layout the pooler reads (padded, packed, shared-prefix segments).

Hidden states are their position's index (plus the row's in the padded case), so every pooled
mean is a mean of a few integers, computed by hand in the comments.
"""

from __future__ import annotations

import types

import pytest
import torch

from clipo_megatron.megatron.pooling.microbatch_pooler import (
    SAMPLE_IDX_KEY,
    SEGMENTS_KEY,
    MicrobatchPooler,
)
from clipo_megatron.megatron.pooling.positions import (
    segments_without_last_token,
    without_last_token,
)


def test_the_last_response_position_is_cleared():
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]])
    assert without_last_token(mask).int().tolist() == [
        [0, 1, 1, 0, 0],
        [0, 0, 0, 0, 0],  # a one-token response keeps nothing (theirs: a zero sum)
        [0, 0, 0, 0, 0],
    ]
    seg = torch.tensor([[-1, 0, 0, 1, 1, 1], [2, 2, -1, -1, -1, -1]])
    assert segments_without_last_token(seg).tolist() == [
        [-1, 0, -1, 1, 1, -1],
        [2, -1, -1, -1, -1, -1],
    ]


def _pool(pool_last_token: bool, hidden: torch.Tensor, **mb) -> list[list[float]]:
    pooler = MicrobatchPooler(pool_last_token=pool_last_token)
    list(pooler.tee([{"data_dict": mb["data"], "cu_seqlens_padded": mb.get("cu")}]))
    pooler.pool(hidden)
    return pooler.result()[1][:, 0].tolist()


@pytest.mark.parametrize("last, want", [(True, [20.0, 31.0]), (False, [15.0, 26.0])])
def test_padded(last, want):
    # row 0 answers at positions 1..3, row 1 at 2..4; hidden[s, j] = 10 s + j
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]])
    hidden = (10 * torch.arange(5.0)[:, None] + torch.arange(2.0)[None, :])[..., None]  # [S, b, 1]
    data = {SAMPLE_IDX_KEY: torch.arange(2), "token_mask": mask}
    # all: (10 + 20 + 30) / 3, (20 + 30 + 40) / 3 + 1; before the last: (10 + 20) / 2, (20 + 30) / 2 + 1
    assert _pool(last, hidden, data=data) == want


@pytest.mark.parametrize("last, want", [(True, [2.5, 7.5]), (False, [2.0, 7.0])])
def test_packed(last, want):
    # rows of 4 and 5 tokens packed at 0 and 4; answers at row positions 2..3 and 3..4
    mask = torch.tensor([[0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])
    data = {
        SAMPLE_IDX_KEY: torch.arange(2),
        "token_mask": mask,
        "input_lengths": torch.tensor([4, 5]),
    }
    hidden = torch.arange(9.0)[:, None, None]  # [T, 1, 1]: stream positions 2, 3 and 7, 8
    assert _pool(last, hidden, data=data, cu=torch.tensor([0, 4, 9])) == want


@pytest.mark.parametrize("last, want", [(True, [1.5, 4.0]), (False, [1.0, 3.5])])
def test_shared_prefix_segments(last, want):
    # one row: a shared prompt token, sample 0 at 1..2, sample 1 at 3..5; hidden = position
    data = {SAMPLE_IDX_KEY: torch.arange(2), SEGMENTS_KEY: torch.tensor([[-1, 0, 0, 1, 1, 1]])}
    hidden = torch.arange(6.0)[:, None, None]  # [T, R, 1]
    assert _pool(last, hidden, data=data) == want


def test_the_nemo_rl_worker_pools_as_the_config_says(monkeypatch):
    """ClipoWorkerMixin.get_logprobs builds its pooler with `clipo.pool_last_token`."""
    from clipo_megatron.nemo_rl import worker as w

    built = []

    class Recording(MicrobatchPooler):
        def __init__(self, **kw):
            built.append(kw["pool_last_token"])
            super().__init__(**kw)

    class Base:
        def get_logprobs(self, *, data, micro_batch_size=None):
            it, *_ = self._clipo_iterator_module.get_microbatch_iterator()
            return list(it)

    class Worker(w.ClipoWorkerMixin, Base):
        _clipo_iterator_module = types.SimpleNamespace(
            get_microbatch_iterator=lambda: (iter([{SAMPLE_IDX_KEY: [0], "token_mask": [[1]]}]),)
        )
        model = None

    monkeypatch.setattr(w, "MicrobatchPooler", Recording)
    worker = Worker()
    worker._clipo = w.WorkerPassState(pool_last_token=False)
    worker.get_logprobs(data={SAMPLE_IDX_KEY: [0]})
    assert built == [False]
    assert w.WorkerPassState().pool_last_token is True  # the default: y1..yT


def _pool_with_empty(pool_last_token: bool, hidden: torch.Tensor, **mb):
    pooler = MicrobatchPooler(pool_last_token=pool_last_token)
    list(pooler.tee([{"data_dict": mb["data"], "cu_seqlens_padded": mb.get("cu")}]))
    pooler.pool(hidden)
    return pooler.result()[1][:, 0].tolist(), pooler.empty_rows().tolist()


@pytest.mark.parametrize("last", [True, False])
def test_a_row_with_nothing_to_pool_is_flagged_not_raised(last):
    # padded: row 0 answers at 1..3; row 1 is a one-token answer at 2; row 2 an empty response.
    # With the last token left out (the reproduction recipes), row 1 has nothing to pool either.
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]])
    hidden = (10 * torch.arange(5.0)[:, None] + torch.arange(3.0)[None, :])[..., None]  # [S, b, 1]
    data = {SAMPLE_IDX_KEY: torch.arange(3), "token_mask": mask}
    pooled, empty = _pool_with_empty(last, hidden, data=data)
    # all: (10 + 20 + 30) / 3 = 20, row 1: 20 + 1 = 21; before the last: (10 + 20) / 2 = 15
    assert pooled == ([20.0, 21.0, 0.0] if last else [15.0, 0.0, 0.0])
    assert empty == [False, not last, True]


def test_packed_empty_response_is_flagged():
    # rows of 4, 3 (prompt only: an empty response) and 5 tokens packed at 0, 4 and 7
    mask = torch.tensor([[0, 0, 1, 1, 0], [0, 0, 0, 0, 0], [0, 0, 0, 1, 1]])
    data = {
        SAMPLE_IDX_KEY: torch.tensor([5, 6, 7]),
        "token_mask": mask,
        "input_lengths": torch.tensor([4, 3, 5]),
    }
    hidden = torch.arange(12.0)[:, None, None]  # [T, 1, 1]: stream positions 2, 3 and 10, 11
    pooled, empty = _pool_with_empty(True, hidden, data=data, cu=torch.tensor([0, 4, 7, 12]))
    assert pooled == [2.5, 0.0, 10.5] and empty == [False, True, False]
