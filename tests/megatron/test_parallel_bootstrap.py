# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""megatron.parallel, the one reader of parallel_state: stage facts and groups of a world-1 run."""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")

from clipo_megatron.megatron import parallel as mp  # noqa: E402
from clipo_megatron.runner import parallel as runner_parallel  # noqa: E402

pytestmark = [pytest.mark.mcore]


def test_world_of_one_is_first_and_last_stage_of_size_one_groups(mcore_single_process):
    mp.ensure_model_parallel(1, 1)  # already initialised: a no-op
    assert mp.model_parallel_is_initialized()
    assert mp.is_pipeline_first_stage() and mp.is_pipeline_last_stage()
    assert runner_parallel.is_pipeline_first_stage() and runner_parallel.is_pipeline_last_stage()
    assert (mp.pipeline_world_size(), mp.pipeline_rank(), mp.pipeline_last_rank()) == (1, 0, 0)
    assert (mp.tensor_parallel_world_size(), mp.tensor_parallel_rank()) == (1, 0)
    assert (mp.data_parallel_rank(), mp.context_parallel_rank()) == (0, 0)
    groups = mp.ParallelGroups.from_parallel_state(sequence_parallel=True)
    assert [mp.group_size(g) for g in (groups.tp, groups.cp, groups.dp, groups.pp)] == [1] * 4
    assert groups.sequence_parallel
    assert mp.group_size(mp.model_parallel_group()) == 1


def test_other_tp_size_than_the_initialised_one_is_named(mcore_single_process):
    with pytest.raises(
        ValueError, match="already initialised with TP=1, the run asks for parallel.tp=2"
    ):
        mp.ensure_model_parallel(2, 1)
