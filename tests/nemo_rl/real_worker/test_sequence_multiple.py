# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The preflight's `policy.make_sequence_length_divisible_by` refusal (`guard/preflight_parallel.py`
`min_sequence_multiple`) is NeMo-RL's own failure, not a rule CLIPO adds: NeMo-RL's Megatron
worker *without CLIPO* (no pooler, no head), at TP 2 + sequence parallel with sequence packing
off -- the six refused recipes' shape (TP 2-4, SP on, packing and dynamic batching off, the value
1) -- stops on a batch whose padded length is odd, in Megatron-Core's sequence-parallel scatter
of the embedding; the same rows padded to the multiple the preflight asks for (TP) run.

Stand-ins: the CPU layer spec (`cpu_patches`, block-diagonal SDPA attention) in place of
TransformerEngine's; the failing check is Megatron-Core's own embedding path, which the spec does
not replace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clipo_testkit.nemo_rl.real_worker.build import requirements

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow, pytest.mark.multiprocess]


def _padded_to(data, width: int, pad_id: int):
    """The rows re-padded to `width` columns (NeMo-RL pads a batch to its longest row rounded up
    to `make_sequence_length_divisible_by`)."""
    import torch
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    out = BatchedDataDict(dict(data))
    for key in ("input_ids", "token_mask"):
        t = data[key][:, :width]
        pad = width - t.shape[1]
        fill = pad_id if key == "input_ids" else 0
        out[key] = torch.nn.functional.pad(t, (0, pad), value=fill) if pad > 0 else t
    return out


def unpacked_tp2_sp_without_clipo(rank: int, world: int, out_dir: str, model_dir: str) -> dict:
    import traceback

    from clipo_testkit.nemo_rl.real_worker import build, scenario
    from clipo_testkit.nemo_rl.real_worker.layouts import Layout, _sharding, layout_policy

    layout = Layout(tp=2, sp=True, clipo=False)
    assert world == layout.world
    out, model = Path(out_dir), Path(model_dir)
    policy = layout_policy(build.contract_policy(model, out, packing=False), layout)
    assert not policy["sequence_packing"]["enabled"]
    worker = build.build_worker(policy, sharding=_sharding(layout))  # clipo_setup never called
    tok = worker.tokenizer
    data = scenario.batch(tok.pad_token_id, len(tok))
    longest = int(data["input_lengths"].max())
    odd = longest if longest % 2 else longest + 1  # divisible by 1, not by TP
    res: dict[str, Any] = {"rank": rank, "odd": odd, "clipo": worker._clipo}
    # the preflight's fix first (a stopped get_logprobs leaves NeMo-RL's timer running)
    lp = worker.get_logprobs(data=_padded_to(data, odd + 1, tok.pad_token_id))["logprobs"]
    res["even_shape"] = tuple(lp.shape)
    try:
        worker.get_logprobs(data=_padded_to(data, odd, tok.pad_token_id))
        res["odd_error"] = None
    except Exception as e:  # the run's stop, as a user would see it
        res["odd_error"] = f"{type(e).__name__}: {e}".splitlines()[0]
        res["odd_where"] = [f.filename for f in traceback.extract_tb(e.__traceback__)]
    return res


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    missing = requirements()
    if missing:
        pytest.skip(missing)
    from clipo_testkit.nemo_rl.real_worker import build

    return build.tiny_model(tmp_path_factory.mktemp("seq_multiple") / "model")


@pytest.mark.contract_full
def test_an_odd_length_stops_nemo_rls_worker_without_clipo(model_dir, tmp_path):
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks

    runs = run_ranks(unpacked_tp2_sp_without_clipo, 2, str(tmp_path), str(model_dir))
    for res in runs.values():
        assert res["clipo"] is None  # CLIPO off: the failure is NeMo-RL's and Megatron-Core's
        assert res["odd_error"] is not None, f"length {res['odd']} ran at TP 2 + SP"
        assert any(w.endswith("tensor_parallel/mappings.py") for w in res["odd_where"]), res
        assert res["even_shape"][1] == res["odd"] + 1
    print(f"\n[seq multiple] TP 2 + SP, unpacked, length {res['odd']}: {res['odd_error']}")
