# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What each rank runs for the empty-response case: NeMo-RL's real `get_logprobs` over a packed
batch in which rows `EMPTY` have no response token, then the CLIPO head step (`layouts.Layout`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clipo_testkit.nemo_rl.inspection import head_state
from clipo_testkit.nemo_rl.real_worker import scenario
from clipo_testkit.nemo_rl.real_worker.layouts import Layout, _build

# row 1 (correct) leaves group 0 = rows 0-3 with 2 correct and 1 incorrect: still valid; row 5
# (correct) leaves group 1 = rows 4-7 with 1 correct: invalid, as a group of 3 with 1 correct is
EMPTY = (1, 5)


def empty_rows_methods(
    rank: int, world: int, out_dir: str, model_dir: str, layout: Layout
) -> dict[str, Any]:
    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY

    assert world == layout.world
    policy, worker = _build(Path(out_dir), Path(model_dir), layout)
    tok = worker.tokenizer
    data = scenario.batch(tok.pad_token_id, len(tok), empty_rows=EMPTY)
    pack = scenario.packing_args(policy)
    shards, _ = data.shard_by_batch_size(layout.dp, batch_size=None, sequence_packing_args=pack)
    shard = shards[layout.coords(rank)["dp"]]
    res: dict[str, Any] = {"rank": rank, "data": dict(data), **layout.coords(rank)}
    res["rows"] = shard[SAMPLE_IDX_KEY].clone()
    res["logprobs"] = worker.get_logprobs(data=shard)["logprobs"].double()
    res["pooled_rows"] = head_state(worker).rows.cpu().clone()
    res["pooled"] = head_state(worker).pooled.detach().float().cpu().clone()
    res["empty"] = head_state(worker).empty.cpu().clone()
    res["head_before"] = worker.clipo_head_state()["head"]
    step = worker.clipo_head_step(correct=scenario.CORRECT, group_ids=scenario.GROUPS, step=0)
    res["r_cl_rows"], res["r_cl"] = step["sample_idx"], step["rewards"].double()
    res["metrics"] = step["metrics"]
    res["head_after_state"] = worker.clipo_head_state()
    return res
