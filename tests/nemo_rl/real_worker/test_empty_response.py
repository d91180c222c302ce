# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One empty response never stops a run: NeMo-RL's own Megatron worker, a packed batch in which two
rows have no response token (`empty_response.EMPTY`), TP 1 and TP 2 + SP.

Held against: Hugging Face's final-norm states for the pooled rows (1e-5, as `test_real_worker`);
and for r_CL and the head's update, the same CLIPO step run here by hand on the six rows that have
tokens (a plain torch head with the worker's initial weights, `HeadTrainer`), so "left out" means
exactly "as if the rows were not in the batch". r_CL 2e-5 (test_layouts' bound); the head's
gradient through AdamW's first moment (1 - beta1) g, relative 1e-4, and the head's weights after
the step, 1e-6 (they move by about lr = 1e-3). The empty rows: zero pooled vectors, r_CL exactly
0, counted in `clipo/empty_responses`. Before this change the worker raised "empty response(s) at
rows [...]".
"""

from __future__ import annotations

import pytest
import torch

from clipo_testkit.nemo_rl.real_worker.build import requirements
from clipo_testkit.nemo_rl.real_worker.layouts import Layout

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow, pytest.mark.multiprocess]

CASES = {
    "tp1": pytest.param(Layout(), marks=pytest.mark.contract_full),  # tp2-sp covers the path
    "tp2-sp": Layout(tp=2, sp=True),
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    missing = requirements()
    if missing:
        pytest.skip(missing)
    from clipo_testkit.nemo_rl.real_worker import build

    return build.tiny_model(tmp_path_factory.mktemp("empty") / "model")


class _Head(torch.nn.Module):
    """The replicated head's function, e = normalise(W h), as a plain torch module."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.proj = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            self.proj.weight.copy_(weight)

    def forward(self, x):
        from clipo_megatron.core.contrastive_loss import l2_normalize

        return l2_normalize(self.proj(x))


def _reference_step(res: dict) -> tuple[dict[int, float], dict]:
    """The CLIPO step on the rows with tokens only, from the worker's head before its step
    -> ({row: r_CL}, the head trainer's state after it)."""
    from clipo_megatron.core.config import CLIPOConfig
    from clipo_megatron.megatron.head_trainer import HeadTrainer
    from clipo_testkit.nemo_rl.real_worker import scenario

    keep = ~res["empty"]
    rows = res["pooled_rows"][keep]
    trainer = HeadTrainer(
        _Head(res["head_before"]["proj.weight"]),
        CLIPOConfig.from_dict(scenario.CLIPO["method"]),
    )
    out = trainer.step(
        res["pooled"][keep],
        scenario.CORRECT[rows].float(),
        scenario.GROUPS[rows],
        rows,
        step=0,
    )
    r = {int(i): float(v) for i, v in zip(rows, out.rewards)}
    return r, trainer.state_dict()


@pytest.mark.parametrize("layout", list(CASES.values()), ids=list(CASES))
def test_empty_responses_leave_the_contrastive_set(layout, model_dir, tmp_path):
    from clipo_testkit.nemo_rl.real_worker import scenario
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks
    from tests.nemo_rl.real_worker.empty_response import EMPTY, empty_rows_methods

    out = run_ranks(empty_rows_methods, layout.world, str(tmp_path), str(model_dir), layout)
    first = out[0]
    hf = scenario.hf_reference(model_dir, first["data"])
    for rank, res in out.items():
        rows = res["pooled_rows"].tolist()
        assert sorted(rows) == list(range(scenario.B)), rank
        empty = {r for r, e in zip(rows, res["empty"].tolist()) if e}
        assert empty == set(EMPTY), (rank, empty)
        for i, r in enumerate(rows):
            if r in EMPTY:
                assert float(res["pooled"][i].abs().max()) == 0.0, (rank, r)
            else:
                err = float((res["pooled"][i] - hf["pooled"][r]).abs().max())
                assert err < 1e-5, (rank, r, err)
        r_cl = {int(i): float(v) for i, v in zip(res["r_cl_rows"], res["r_cl"])}
        assert all(r_cl[r] == 0.0 for r in EMPTY), (rank, r_cl)
        assert res["metrics"]["clipo/empty_responses"] == len(EMPTY), rank
        ref_r, ref = _reference_step(res)
        assert max(abs(r_cl[r] - v) for r, v in ref_r.items()) < 2e-5, (rank, r_cl, ref_r)
        # group 0 kept its validity (anchors: rows 0 and 3); group 1 lost it, r_CL 0 throughout
        m = res["metrics"]
        assert m["clipo/num_anchors"] == 2 and m["clipo/valid_group_frac"] == 0.5, m
        assert all(r_cl[r] == 0.0 for r in (4, 6, 7)), r_cl
        # the head's gradient came from the six rows alone: AdamW's first moment, (1 - beta1) g
        m1 = res["head_after_state"]["optimizer"]["state"][0]["exp_avg"]
        ref_m1 = ref["optimizer"]["state"][0]["exp_avg"]
        assert float(m1.abs().max()) > 0, rank
        torch.testing.assert_close(m1, ref_m1, rtol=1e-4, atol=1e-4 * float(ref_m1.abs().max()))
        w, w0 = res["head_after_state"]["head"]["proj.weight"], res["head_before"]["proj.weight"]
        assert float((w - w0).abs().max()) > 1e-4, rank  # the step moved the head
        torch.testing.assert_close(w, ref["head"]["proj.weight"], rtol=0, atol=1e-6)
