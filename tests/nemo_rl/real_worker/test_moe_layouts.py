# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own Megatron worker with the CLIPO extension on a mixture-of-experts policy, in the
expert-parallel layouts NeMo-RL's MoE recipes run, each against the EP 1 run (`layouts.py`'s calls:
get_logprobs with the pooler, the CLIPO head step, one NeMo-RL `train` step, get_logprobs again).

The model (`moe_model.py`): a 2-layer Qwen3-MoE, 4 experts, top-2, the router's load-balancing loss
on (`aux_loss`, coefficient 1e-2), imported by Bridge from Hugging Face files, as NeMo-RL imports a
recipe's model. (A shared-expert variant does not import on CPU yet: `moe_model.py`.)

What stands in on CPU (checked, not assumed):
- the token dispatcher is the recipes' own `alltoall`: Megatron-Core's `all_to_all_single` over the
  EP group runs on gloo (torch's gloo backend implements `alltoall_base`), so nothing stands in;
- experts: `SequentialMLP` (`moe_grouped_gemm: false`): grouped GEMM is a GPU kernel;
- `moe_permute_fusion: false` (a TransformerEngine kernel); the norms and core attention of the
  dense layout cases (`thd_attention.py`), Q / K norms as torch's RMSNorm (`moe_model.TorchQKNorm`).

The reference is EP 1 at the same data-parallel size. Megatron-Core carves the EP group out of
the data-parallel ranks (EP 2 on 2 processes is DP 2 for the attention and the router), and the
router's `aux_loss` is a statistic of each micro-batch's tokens (reduced over TP x CP only,
`router._apply_aux_loss`): its gradient depends on which rows share a micro-batch, so DP 2 and DP 1
differ by design. EP 1 at DP 2 has the same micro-batches on the same ranks with every expert on
every rank: it isolates what expert parallelism changes (experts sharded, tokens dispatched over
the EP group, expert gradients reduced over the expert-data-parallel group). The forward
quantities (logprobs, pooled rows, r_CL, the loss) do not depend on the split and are held against
the one-process run too.

Tolerances: the fp32 bounds of `test_layouts` (module docstring there), and for the router's and
experts' weights after the step the bound of the final norm's weight (1e-6: one Adam step moves a
weight by lr = 1e-4 in sign; a wrong or missing gradient moves it by that much, not 1e-6). The
router's logged aux loss (NeMo-RL's `moe_metrics`): relative 1e-5, as the loss.
"""

from __future__ import annotations

import pytest
import torch

from tests.nemo_rl.real_worker.build import requirements
from tests.nemo_rl.real_worker.layouts import Layout
from tests.nemo_rl.real_worker.test_layouts import FP32, check_layout

# every case is `contract_full` (CONTRIBUTING.md): each spawns two or three worker jobs of about
# a minute each, and CI's contract leg has no room left under its 60 minutes
pytestmark = [
    pytest.mark.nemo_rl,
    pytest.mark.contract_full,
    pytest.mark.slow,
    pytest.mark.multiprocess,
]
REF = Layout(dp=2)  # EP 1 at DP 2 (module docstring)
CASES = {
    "ep2": (Layout(dp=2, ep=2), REF),
    # the Qwen3-30B-A3B recipe's shape in small: TP 2 + SP, EP 2, expert TP 1, 4 processes,
    # Megatron's distributed optimizer with the recipes' overlaps
    "tp2-sp-ep2-distopt": (Layout(tp=2, dp=2, ep=2, sp=True, dist_opt=True), REF),
}


def _model(tmp_path_factory, shared: bool):
    missing = requirements()
    if missing:
        pytest.skip(missing)
    from tests.nemo_rl.real_worker import moe_model

    name = "moe-shared" if shared else "moe"
    return moe_model.tiny_moe_model(tmp_path_factory.mktemp(name) / "model", shared=shared)


class MoeRuns:
    """One spawned run per (model, layout) for the whole module."""

    def __init__(self, tmp_path_factory):
        self.tmp, self.done = tmp_path_factory, {}

    def measured(self, model_dir, layout: Layout) -> dict:
        from tests.nemo_rl.real_worker.layouts import layout_methods
        from tests.nemo_rl.real_worker.spawn import run_ranks

        key = (str(model_dir), layout)
        if key not in self.done:
            root = self.tmp.mktemp(layout.name)
            self.done[key] = run_ranks(
                layout_methods, layout.world, str(root / "a"), str(model_dir), layout
            )
        return self.done[key]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> MoeRuns:
    return MoeRuns(tmp_path_factory)


# the shared-expert variant (GLM-4.5-MoE) does not import on CPU yet: Bridge's GLM-4.5 bridge maps
# the routed experts for TE's grouped GEMM only (no SequentialMLP mapping, which Qwen3-MoE's has)
@pytest.fixture(scope="module", params=[False], ids=["routed"])
def moe_dir(request, tmp_path_factory):
    return _model(tmp_path_factory, request.param)


def check_experts(out: dict, ref: dict, bound: float) -> float:
    """Every router / expert weight after the step, by global expert index, against the reference
    (each weight present on some rank of `out`; replicas bit-equal)."""
    want = {}
    for res in ref.values():
        want.update(res["experts"])
    got: dict[str, torch.Tensor] = {}
    for rank, res in sorted(out.items()):
        for k, v in res["experts"].items():
            if k in got:
                assert torch.equal(got[k], v), (rank, k)  # an EP / TP / DP replica
            got[k] = v
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    assert any(".expert" in k for k in want) and any("router" in k for k in want)
    err = max(float((got[k] - want[k]).abs().max()) for k in want)
    assert err <= bound, f"router / expert weights after the step: {err} > {bound}"
    return err


def check_head(out: dict, ref: dict, bound: float) -> float:
    """CLIPO's head after its step on every rank against the reference's (one replicated head:
    a head drawn per rank differs on the ranks that hold few rows, which r_CL may not show)."""
    err = 0.0
    for res in out.values():
        for k, v in ref["head"].items():
            err = max(err, float((res["head"][k].float() - v.float()).abs().max()))
    assert err <= bound, f"CLIPO head after its step: {err} > {bound}"
    return err


def moe_metrics(out: dict) -> dict[str, float]:
    """NeMo-RL's logged MoE metrics (rank 0's: every rank logs the reduced values)."""
    metrics = out[0]["moe_metrics"]
    assert metrics, "no MoE metrics: the router's aux loss is not on"
    assert any("load_balancing_loss" in k for k in metrics), metrics
    return {k: float(v) for k, v in metrics.items()}


def check_moe_metrics(got: dict[str, float], want: dict[str, float], rel: float) -> float:
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    err = max(abs(got[k] - want[k]) / max(abs(want[k]), 1e-30) for k in want)
    assert err <= rel, f"MoE metrics {got} against {want}: relative {err} > {rel}"
    return err


@pytest.mark.parametrize("case", list(CASES))
def test_moe_layout_equals_ep1(case, moe_dir, runs):
    layout, ref_layout = CASES[case]
    ref = runs.measured(moe_dir, ref_layout)
    out = runs.measured(moe_dir, layout)
    errs = check_layout(out, _merged(ref), layout, FP32)  # every rank, every row
    errs["experts"] = check_experts(out, ref, FP32["norm_weight"])
    errs["head"] = check_head(out, ref[0], FP32["norm_weight"])
    errs["moe_metrics"] = check_moe_metrics(moe_metrics(out), moe_metrics(ref), FP32["rel"])
    print(f"\n[moe] {moe_dir.parent.name} {layout.name} ({layout.world} processes) vs EP 1: {errs}")


def _merged(ref: dict) -> dict:
    """The reference's ranks as one result (every row's numbers), for `check_layout`."""
    first = dict(ref[0])
    for key in ("logprobs", "logprobs_after", "lengths", "pooled", "r_cl"):
        first[key] = _pad_cat([r[key] for _, r in sorted(ref.items())])
    for rows in ("rows", "pooled_rows", "r_cl_rows"):
        first[rows] = torch.cat([r[rows] for _, r in sorted(ref.items())])
    return first


def _pad_cat(parts: list[torch.Tensor]) -> torch.Tensor:
    if parts[0].dim() == 1:
        return torch.cat(parts)
    width = max(p.shape[1] for p in parts)
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts])


def test_moe_ep1_matches_hugging_face(moe_dir, runs):
    """The EP 1 reference itself: NeMo-RL's packed forward of the MoE model equals Hugging Face's
    row by row, and CLIPO's capture pools the final norm's output (HF's last hidden state), not a
    router's or an expert's (fp32 bounds of `test_real_worker`: 1e-5)."""
    import transformers

    from tests.nemo_rl.real_worker import scenario

    tok = transformers.AutoTokenizer.from_pretrained(moe_dir)
    hf = scenario.hf_reference(moe_dir, scenario.batch(tok.pad_token_id, len(tok)))
    ref = _merged(runs.measured(moe_dir, REF))
    lp_err = max(
        float((ref["logprobs"][j, 1:n] - hf["logprobs"][row, 1:n]).abs().max())
        for j, (row, n) in enumerate(zip(ref["rows"].tolist(), ref["lengths"].tolist()))
    )
    pooled_err = float((ref["pooled"] - hf["pooled"][ref["pooled_rows"]]).abs().max())
    print(
        f"\n[moe] {moe_dir.parent.name} EP 1 vs HF: logprobs {lp_err:.2e}, pooled {pooled_err:.2e}"
    )
    assert lp_err <= FP32["logprobs"] and pooled_err <= FP32["pooled"], (lp_err, pooled_err)


def test_moe_aux_loss_same_with_clipo_on_and_off(moe_dir, runs):
    """CLIPO's capture (a forward hook on the final norm in the logprob pass) and its head step
    leave the MoE path alone: with CLIPO off the same EP 2 calls give bit-equal router aux loss
    (NeMo-RL's logged `moe_metrics`), loss, grad norm, router / expert weights and logprobs."""
    on = runs.measured(moe_dir, Layout(dp=2, ep=2))
    off = runs.measured(moe_dir, Layout(dp=2, ep=2, clipo=False))
    assert moe_metrics(off) == moe_metrics(on)
    for rank in on:
        a, b = on[rank], off[rank]
        assert a["train"] == b["train"], rank
        for key in ("logprobs", "logprobs_after"):
            assert torch.equal(a[key], b[key]), (rank, key)
        assert sorted(a["experts"]) == sorted(b["experts"])
        for k, v in a["experts"].items():
            assert torch.equal(v, b["experts"][k]), (rank, k)
        assert "pooled" in a and "pooled" not in b and "r_cl" not in b  # CLIPO was on / off
    print(f"\n[moe] {moe_dir.parent.name} CLIPO on == off: {moe_metrics(on)}, {on[0]['train']}")
