# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own Megatron worker with the CLIPO extension on a mixture-of-experts policy, in the
expert-parallel layouts NeMo-RL's MoE recipes run, each against the EP 1 run (`layouts.py`'s calls:
get_logprobs with the pooler, the CLIPO head step, one NeMo-RL `train` step, get_logprobs again).

The models (`moe_model.py`), imported by Bridge from Hugging Face files, as NeMo-RL imports a
recipe's model; every case runs for both (`moe_dir`):
- `routed`: a 2-layer Qwen3-MoE, 4 experts, top-2, softmax router;
- `shared`: a 2-layer ERNIE 4.5 MoE (Bridge's `ernie_45_bridge.py`), 4 experts, top-2 and one
  shared expert (TP-sharded under TP 2, not expert-TP), Bridge's sigmoid router with an expert
  bias (held at zero: `moe_router_bias_update_rate: 0`).
Both with the router's load-balancing loss on (`aux_loss`, coefficient 1e-2).

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

Beyond the fp32 layouts: bf16 at EP 2 against bf16 at EP 1 (DP 2), and NeMo-RL's checkpoint
with CLIPO's head saved after step 1 at TP 2 + SP, EP 2, resumed at EP 4 (`MOVES`: why not EP 1),
step 2 against the saver's step 2. The Hugging Face check runs for the routed model only (above
it: why).

Tolerances: the fp32 bounds of `test_layouts` (module docstring there), and for the router's,
experts' and head's weights after the step the bound of the final norm's weight (1e-6: one Adam
step moves a weight by lr = 1e-4 in sign; a wrong or missing gradient moves it by that much, not
1e-6). The router's logged aux loss (NeMo-RL's `moe_metrics`): relative 1e-5, as the loss. bf16:
`test_layouts.bf16_bounds` from the bf16 reference's magnitudes; the expert weights, bf16 copies of
fp32 main weights, u * max|w| + 1e-6; the head (fp32, one AdamW step of lr * sign(g) from pooled
rows equal within bf16's bound) 2 * head lr: a sign flip of a near-zero gradient, no more.
"""

from __future__ import annotations

import json

import pytest
import torch

from clipo_testkit.nemo_rl.real_worker.build import requirements
from clipo_testkit.nemo_rl.real_worker.layouts import Layout
from tests.nemo_rl.real_worker.moe_checks import check_all, experts_of, merged, moe_metrics
from tests.nemo_rl.real_worker.test_layouts import FP32, Runs, bf16_bounds

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow, pytest.mark.multiprocess]
# CI's set holds one case, `[routed-ep2]` (two 2-process worker jobs: the EP 1 reference and EP 2);
# the rest is `contract_full` (CONTRIBUTING.md), one command away
FULL = pytest.mark.contract_full
CI_CASES = ("ep2",)
REF = Layout(dp=2)  # EP 1 at DP 2 (module docstring)
CASES = {
    "ep2": (Layout(dp=2, ep=2), REF),
    # the Qwen3-30B-A3B recipe's shape in small: TP 2 + SP, EP 2, expert TP 1, 4 processes,
    # Megatron's distributed optimizer with the recipes' overlaps
    "tp2-sp-ep2-distopt": (Layout(tp=2, dp=2, ep=2, sp=True, dist_opt=True), REF),
}
# bf16 at EP 2 against bf16 at EP 1 (DP 2): what expert parallelism changes at bf16
BF16 = (Layout(dp=2, ep=2, bf16=True), Layout(dp=2, bf16=True))
# the head's checkpoint and NeMo-RL's (Bridge's torch_dist resharding the experts and their Adam
# state) moved between EP layouts at the same DP (the aux loss's micro-batches unchanged): TP 2 + SP
# with EP 2 (2 experts a rank) and EP 4 (1 a rank; Megatron-Core carves EP out of TP x DP at expert
# TP 1). Not EP 1 <-> EP > 1: Megatron-Core keeps expert weights in a separate optimizer only when
# they use the expert groups (EP > 1 or expert TP != TP; tensor_parallel/layers.py `use_expert_pgs`),
# so the two checkpoints' optimizer param groups differ and the resume stops in Megatron-Core's
# optimizer.py ("Could not find parameter group" EP 2 -> 1, "Expected 2 entries" EP 1 -> 2).
EP2, EP4 = Layout(tp=2, dp=2, ep=2, sp=True), Layout(tp=2, dp=2, ep=4, sp=True)
MOVES = {"tp2-sp-ep2-to-ep4": (EP2, EP4)}


def _model(tmp_path_factory, shared: bool):
    missing = requirements()
    if missing:
        pytest.skip(missing)
    from clipo_testkit.nemo_rl.real_worker import moe_model

    name = "moe-shared" if shared else "moe"
    return moe_model.tiny_moe_model(tmp_path_factory.mktemp(name) / "model", shared=shared)


class MoeRuns:
    """`test_layouts.Runs` per model: one run per (model, layout) for the whole module; a layout
    a selected move saves from runs `saved_then_measured` (its step 1 serves the layout cases)."""

    def __init__(self, tmp_path_factory, savers: set[Layout]):
        self.tmp, self.savers, self.by_model = tmp_path_factory, savers, {}

    def _runs(self, model_dir) -> Runs:
        key = str(model_dir)
        if key not in self.by_model:
            self.by_model[key] = Runs(model_dir, self.tmp, self.savers)
        return self.by_model[key]

    def measured(self, model_dir, layout: Layout) -> dict:
        return self._runs(model_dir).measured(layout)

    def checkpoint(self, model_dir, layout: Layout) -> tuple[str, dict]:
        return self._runs(model_dir).checkpoint(layout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request) -> MoeRuns:
    moves = [
        item.callspec.params["move"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_moe_checkpoint_moves_between_ep_layouts"
    ]
    return MoeRuns(tmp_path_factory, {MOVES[m][0] for m in moves})


@pytest.fixture(
    scope="module", params=[False, pytest.param(True, marks=FULL)], ids=["routed", "shared"]
)
def moe_dir(request, tmp_path_factory):
    return _model(tmp_path_factory, request.param)


def _shared(moe_dir) -> bool:
    from clipo_testkit.nemo_rl.real_worker.moe_model import has_shared_expert

    return has_shared_expert(moe_dir)


def _name(moe_dir) -> str:
    return "shared" if _shared(moe_dir) else "routed"


@pytest.mark.parametrize(
    "case", [c if c in CI_CASES else pytest.param(c, marks=FULL) for c in CASES]
)
def test_moe_layout_equals_ep1(case, moe_dir, runs):
    layout, ref_layout = CASES[case]
    ref, out = runs.measured(moe_dir, ref_layout), runs.measured(moe_dir, layout)
    fine = FP32["norm_weight"]
    errs = check_all(out, ref, layout, FP32, shared=_shared(moe_dir), weights=fine, head=fine)
    print(f"\n[moe] {_name(moe_dir)} {layout.name} ({layout.world} processes) vs EP 1: {errs}")


@FULL
def test_moe_bf16_ep2_equals_bf16_ep1(moe_dir, runs):
    """bf16 at EP 2 against bf16 at EP 1, DP 2 (module docstring: bounds)."""
    from clipo_megatron.core.config import CLIPOConfig
    from clipo_testkit.nemo_rl.real_worker import scenario
    from clipo_testkit.nemo_rl.real_worker.layouts import BF16_U

    layout, ref_layout = BF16
    ref, out = runs.measured(moe_dir, ref_layout), runs.measured(moe_dir, layout)
    layers = json.loads((moe_dir / "config.json").read_text())["num_hidden_layers"]
    tol = bf16_bounds(merged(ref), layers)
    biggest = max(float(w.abs().max()) for w in experts_of(ref).values())
    weights = BF16_U * biggest + FP32["norm_weight"]
    head = 2 * CLIPOConfig.from_dict(scenario.CLIPO["method"]).head_lr
    errs = check_all(out, ref, layout, tol, shared=_shared(moe_dir), weights=weights, head=head)
    # bf16 in effect: the bf16 reference's logprobs are not the fp32 EP 1 run's
    fp32 = merged(runs.measured(moe_dir, REF))
    assert torch.equal(fp32["rows"], merged(ref)["rows"])
    drift = float((merged(ref)["logprobs"] - fp32["logprobs"]).abs().max())
    assert drift > 100 * FP32["logprobs"], f"bf16 logprobs within {drift} of fp32's: not bf16"
    bounds = {**tol, "experts": weights, "head": head}
    print(f"\n[moe] {_name(moe_dir)} {layout.name} vs {ref_layout.name}: {errs}")
    print(f"[moe] bounds {bounds}; bf16 against fp32 logprobs: {drift:.3g}")


# the routed model only: a move is two 4-process jobs (about 20 minutes on a loaded 2-core box)
@FULL
@pytest.mark.parametrize("move", list(MOVES))
@pytest.mark.parametrize("moe_dir", [False], ids=["routed"], indirect=True)
def test_moe_checkpoint_moves_between_ep_layouts(move, moe_dir, tmp_path, runs):
    """Saved after step 1 in one EP layout, resumed in the other (Bridge's torch_dist reshards
    the experts and their optimizer state, CLIPO's head from its one file): step 2 after the
    resume against the saver's step 2, the router / expert weights and the head included."""
    from clipo_testkit.nemo_rl.real_worker.layouts import resumed_then_measured
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks

    saved_in, resumed_in = MOVES[move]
    ckpt, saved = runs.checkpoint(moe_dir, saved_in)
    args = (resumed_in.world, str(tmp_path / "b"), str(moe_dir), resumed_in, ckpt)
    resumed = run_ranks(resumed_then_measured, *args)
    fine = FP32["norm_weight"]
    errs = check_all(
        resumed, saved, resumed_in, FP32, shared=_shared(moe_dir), weights=fine, head=fine
    )
    print(f"\n[moe] {_name(moe_dir)} {move}: step 2 after the resume vs saved: {errs}")


# The HF comparison holds for the routed model only: Bridge's ERNIE provider routes by sigmoid
# scores (ernie_45_bridge.py, `provider.moe_router_score_function = "sigmoid"`, with an expert
# bias), while Hugging Face's Ernie4_5_MoeTopKRouter routes by a softmax over all experts: the
# same experts are chosen (both monotone in the logit, the bias zero) but weighted
# sigmoid(l_i) / sum_k sigmoid(l_k) against exp(l_i) / sum_k exp(l_k). Bridge's semantics, not ours.
@FULL
@pytest.mark.parametrize("moe_dir", [False], ids=["routed"], indirect=True)
def test_moe_ep1_matches_hugging_face(moe_dir, runs):
    """The EP 1 reference itself: NeMo-RL's packed forward of the MoE model equals Hugging Face's
    row by row, and CLIPO's capture pools the final norm's output (HF's last hidden state), not a
    router's or an expert's (fp32 bounds of `test_real_worker`: 1e-5)."""
    import transformers

    from clipo_testkit.nemo_rl.real_worker import scenario

    tok = transformers.AutoTokenizer.from_pretrained(moe_dir)
    hf = scenario.hf_reference(moe_dir, scenario.batch(tok.pad_token_id, len(tok)))
    ref = merged(runs.measured(moe_dir, REF))
    lp_err = max(
        float((ref["logprobs"][j, 1:n] - hf["logprobs"][row, 1:n]).abs().max())
        for j, (row, n) in enumerate(zip(ref["rows"].tolist(), ref["lengths"].tolist()))
    )
    pooled_err = float((ref["pooled"] - hf["pooled"][ref["pooled_rows"]]).abs().max())
    print(f"\n[moe] {_name(moe_dir)} EP 1 vs HF: logprobs {lp_err:.2e}, pooled {pooled_err:.2e}")
    assert lp_err <= FP32["logprobs"] and pooled_err <= FP32["pooled"], (lp_err, pooled_err)


@FULL
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
    print(f"\n[moe] {_name(moe_dir)} CLIPO on == off: {moe_metrics(on)}, {on[0]['train']}")
