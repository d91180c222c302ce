# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own Megatron worker with the CLIPO extension in the layouts NeMo-RL's recipes run,
each against the TP 1 fp32 run of the same scenario (`layouts.layout_methods`).

Per rank: the logprobs of its DP shard's rows (every TP / PP rank of a DP rank returns them),
the pooled response states and r_CL where they live (the last pipeline stage; the TP and CP
replicas bit-equal, since every TP / CP rank ends with the same all-reduced sums), the loss
and grad norm of one NeMo-RL `train` step (NLL, packed), the final norm's weight after it, and a
second `get_logprobs` after the step (which reads every weight: a stale parameter gather of the
distributed optimizer shows there).

Tolerances (fp32): logprobs and pooled states 1e-5, as the HF comparison of `test_real_worker`:
TP changes the order of the sums in the vocab-parallel softmax and the row-parallel matmuls, a few
ulp of values of order 1-10. r_CL = 2 * lambda * (cosine terms) / tau: a cosine error of 1e-6
becomes 2 * 0.2 / 0.05 * 1e-6 = 8e-6, bound 2e-5. The loss and grad norm: relative 1e-5.

Tolerances (bf16 against the fp32 run; `bf16_bounds`): the probabilistic rounding-error bound of
`layouts.bf16_relative_bound` times the largest magnitude of the quantity in the fp32 run. r_CL: a
relative error d of the pooled vectors moves a cosine by at most 2d, and r_CL by 2 * lambda / tau
times that: 1.1 here, above r_CL's own range, so in bf16 r_CL is held by its fp32 twin and by
`grpo_train`'s checks (advantages == GRPO(r + r_CL) from the run's own r_CL). The weights after
the step are bf16 copies of fp32 main weights: off by at most half an ulp, u * max|w|. These
bounds catch a wrong weight or a wrong gather, not a small drift; the fp32 case of the same
layout (`tp2-sp-distopt`) is the tight one.
"""

from __future__ import annotations

import json

import pytest
import torch

from clipo_testkit.nemo_rl.real_worker.build import requirements
from clipo_testkit.nemo_rl.real_worker.layouts import Layout

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow, pytest.mark.multiprocess]

FP32 = {"logprobs": 1e-5, "pooled": 1e-5, "r_cl": 2e-5, "rel": 1e-5, "norm_weight": 1e-6}

FULL = pytest.mark.contract_full  # outside CI's set (CONTRIBUTING.md): one command away

CASES = {
    "tp2-sp": pytest.param(Layout(tp=2, sp=True), marks=FULL),  # tp2-sp-distopt covers it
    # Track II's layout in fp32: TP 2 + SP, the distributed optimizer, both overlaps on
    "tp2-sp-distopt": Layout(tp=2, sp=True, dist_opt=True),
    "tp2-sp-headtp": Layout(tp=2, sp=True, head_tp=True),
    "pp2": Layout(pp=2),
    # PP's point-to-point (`batch_isend_irecv` of P2POps) under CUDA's device rules
    "pp2-emulated": pytest.param(Layout(pp=2, emulated=True), marks=FULL),
    # DP 2: the optimizer state sharded, grads reduce-scattered, params all-gathered (overlapped)
    "dp2-distopt": pytest.param(Layout(dp=2, dist_opt=True), marks=FULL),
    # Track II's layout as it runs: bf16 (`bf16_bounds`)
    "tp2-sp-distopt-bf16": pytest.param(
        Layout(tp=2, sp=True, dist_opt=True, bf16=True), marks=FULL
    ),
    # TP 2 x PP 2 (4 processes): the 70B recipes' shape in small
    "tp2-pp2-sp": pytest.param(Layout(tp=2, pp=2, sp=True), marks=FULL),
    # CP 2 on packed sequences: the zigzag split, the CP attention of `thd_attention`
    "cp2": Layout(cp=2),
}


def bf16_bounds(ref: dict, layers: int) -> dict[str, float]:
    """The bf16 tolerances of the module docstring, from the fp32 run's magnitudes."""
    from clipo_megatron.core.config import CLIPOConfig
    from clipo_testkit.nemo_rl.real_worker import scenario
    from clipo_testkit.nemo_rl.real_worker.layouts import BF16_U, bf16_relative_bound

    cfg = CLIPOConfig.from_dict(scenario.CLIPO["method"])
    clipo_scale = 2 * cfg.lam / cfg.temperature  # d r_CL / d cosine, at most
    rel_hidden = bf16_relative_bound(layers)
    rel_logprobs = bf16_relative_bound(layers, logits=True)
    return {
        "logprobs": rel_logprobs * float(ref["logprobs"].abs().max()),
        "pooled": rel_hidden * float(ref["pooled"].abs().max()),
        "r_cl": clipo_scale * 2 * rel_hidden,
        "rel": rel_logprobs,  # the loss is a mean of logprobs, the grad norm follows the same path
        "norm_weight": BF16_U * float(ref["norm_weight"].abs().max()) + FP32["norm_weight"],
    }


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    missing = requirements()
    if missing:
        pytest.skip(missing)
    from clipo_testkit.nemo_rl.real_worker import build

    return build.tiny_model(tmp_path_factory.mktemp("layouts") / "model")


class Runs:
    """One run per layout for the whole module. A layout that a selected checkpoint move saves
    from runs `saved_then_measured`: its step 1 is the calls of `layout_methods`, measured before
    the save, so the layout case and the TP 1 reference read that step 1 and the moves resume from
    its checkpoint (TP 1, TP 2 + SP and PP 2 each run once, not twice or three times, when the
    whole set runs). A resume only reads the checkpoint and each move holds its resume against the
    saver's step 2, so a resume that changed the files would turn the next move red. Any other
    layout (CI's set selects no move) runs `layout_methods`."""

    def __init__(self, model_dir, tmp_path_factory, savers: set[Layout]):
        self.model_dir, self.tmp, self.savers = model_dir, tmp_path_factory, savers
        self.step1: dict[Layout, dict] = {}  # layout -> {rank: step-1 quantities}
        self.saved: dict[Layout, tuple[str, dict]] = {}  # saver -> (checkpoint, {rank: step 2})

    def _ensure(self, layout: Layout) -> None:
        from clipo_testkit.nemo_rl.real_worker.layouts import layout_methods, saved_then_measured
        from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks

        if layout in self.step1:
            return
        root = self.tmp.mktemp(layout.name)
        args = (layout.world, str(root / "a"), str(self.model_dir), layout)
        if layout not in self.savers:
            self.step1[layout] = run_ranks(layout_methods, *args, emulated=layout.emulated)
            return
        ckpt = str(root / "ckpt")
        ranks = run_ranks(saved_then_measured, *args, ckpt, emulated=layout.emulated)
        self.step1[layout] = {r: out["step1"] for r, out in ranks.items()}
        self.saved[layout] = (ckpt, {r: out["step2"] for r, out in ranks.items()})

    def measured(self, layout: Layout) -> dict:
        self._ensure(layout)
        return self.step1[layout]

    def checkpoint(self, layout: Layout) -> tuple[str, dict]:
        self._ensure(layout)
        return self.saved[layout]


@pytest.fixture(scope="module")
def runs(model_dir, tmp_path_factory, request) -> Runs:
    moves = [
        item.callspec.params["move"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_checkpoint_moves_between_layouts"
    ]
    return Runs(model_dir, tmp_path_factory, {MOVES[m][0] for m in moves})


@pytest.fixture(scope="module")
def tp1(runs) -> dict:
    """The one-process fp32 run every layout is held against."""
    return runs.measured(Layout())[0]


def _by_row(rows: torch.Tensor, values: torch.Tensor) -> dict[int, torch.Tensor]:
    return {int(r): values[i] for i, r in enumerate(rows)}


def _max_err(got: dict, ref: dict, lengths: dict | None = None) -> float:
    err = 0.0
    for row, v in got.items():
        n = int(lengths[row]) if lengths is not None else None
        a, b = (v[1:n], ref[row][1:n]) if n is not None else (v, ref[row])
        err = max(err, float((a.double() - b.double()).abs().max()))
    return err


def check_layout(out: dict, ref: dict, layout: Layout, tol: dict) -> dict[str, float]:
    """Every rank checked; returns the largest error of each quantity against TP 1."""
    lengths = _by_row(ref["rows"], ref["lengths"])
    ref_lp, ref_after = (
        _by_row(ref["rows"], ref["logprobs"]),
        _by_row(ref["rows"], ref["logprobs_after"]),
    )
    ref_pool, ref_rcl = (
        _by_row(ref["pooled_rows"], ref["pooled"]),
        _by_row(ref["r_cl_rows"], ref["r_cl"]),
    )
    errs = {
        k: 0.0
        for k in (
            "logprobs",
            "logprobs_after",
            "pooled",
            "r_cl",
            "loss",
            "grad_norm",
            "norm_weight",
        )
    }
    covered: list[int] = []
    last = layout.pp - 1
    for rank, res in sorted(out.items()):
        errs["logprobs"] = max(
            errs["logprobs"], _max_err(_by_row(res["rows"], res["logprobs"]), ref_lp, lengths)
        )
        errs["logprobs_after"] = max(
            errs["logprobs_after"],
            _max_err(_by_row(res["rows"], res["logprobs_after"]), ref_after, lengths),
        )
        for key in ("loss", "grad_norm"):
            rel = abs(res["train"][key] - ref["train"][key]) / abs(ref["train"][key])
            errs[key] = max(errs[key], rel)
        if res["pp"] != last:  # nothing pooled off the last stage, and no r_CL rows
            assert "pooled" not in res and res["r_cl_rows"].numel() == 0, rank
            continue
        assert sorted(res["pooled_rows"].tolist()) == sorted(res["rows"].tolist()), rank
        errs["pooled"] = max(
            errs["pooled"], _max_err(_by_row(res["pooled_rows"], res["pooled"]), ref_pool)
        )
        errs["r_cl"] = max(errs["r_cl"], _max_err(_by_row(res["r_cl_rows"], res["r_cl"]), ref_rcl))
        errs["norm_weight"] = max(
            errs["norm_weight"], float((res["norm_weight"] - ref["norm_weight"]).abs().max())
        )
        if res["tp"] == 0 and res["cp"] == 0:
            covered += res["r_cl_rows"].tolist()
        else:  # a TP / CP replica: bit-equal to TP rank 0, CP rank 0 of its DP rank
            first = next(
                o
                for o in out.values()
                if o["dp"] == res["dp"] and o["pp"] == last and o["tp"] == 0 and o["cp"] == 0
            )
            for key in ("pooled", "r_cl", "norm_weight"):
                assert torch.equal(res[key], first[key]), (rank, key)
    assert sorted(covered) == sorted(ref["r_cl_rows"].tolist()), covered  # each row once
    assert float(ref["r_cl"].abs().max()) > 0  # CLIPO acted on this batch: r_CL is compared
    bounds = {
        "logprobs": tol["logprobs"], "logprobs_after": tol["logprobs"], "pooled": tol["pooled"],
        "r_cl": tol["r_cl"], "loss": tol["rel"], "grad_norm": tol["rel"], "norm_weight": tol["norm_weight"],
    }  # fmt: skip
    bad = {k: (errs[k], bounds[k]) for k in errs if errs[k] > bounds[k]}
    assert not bad, f"{layout.name}: (error, bound) against TP 1: {bad}"
    return errs


@pytest.mark.parametrize("layout", list(CASES.values()), ids=list(CASES))
def test_layout_equals_tp1(layout, tp1, model_dir, runs):
    layers = json.loads((model_dir / "config.json").read_text())["num_hidden_layers"]
    tol = bf16_bounds(tp1, layers) if layout.bf16 else FP32
    errs = check_layout(runs.measured(layout), tp1, layout, tol)
    print(f"\n[layouts] {layout.name} ({layout.world} processes) largest error vs TP 1: {errs}")
    print(f"[layouts] {layout.name} bounds: {tol}")


# A checkpoint saved in one layout, resumed in another: NeMo-RL resumes by construction (Bridge's
# torch_dist reshards the policy and its optimizer state), the head from its one layout-independent
# file. Step 2 after the resume is held against step 2 of the run that saved (fp32 bounds).
MOVES = {
    "tp1-to-tp2-sp": (Layout(), Layout(tp=2, sp=True)),
    "tp1-to-pp2": (Layout(), Layout(pp=2)),
    "tp2-sp-to-tp1": (Layout(tp=2, sp=True), Layout()),
    "pp2-to-tp1": (Layout(pp=2), Layout()),
    # the distributed optimizer's dp_reshardable state: DP may change (resume_layout.py)
    "dp1-distopt-to-dp2-distopt": (Layout(dist_opt=True), Layout(dp=2, dist_opt=True)),
    "tp1-distopt-same": (Layout(dist_opt=True), Layout(dist_opt=True)),
}


@pytest.mark.contract_full
@pytest.mark.parametrize("move", list(MOVES))
def test_checkpoint_moves_between_layouts(move, model_dir, tmp_path, runs):
    from clipo_testkit.nemo_rl.real_worker.layouts import resumed_then_measured
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks

    saved_in, resumed_in = MOVES[move]
    ckpt, saved = runs.checkpoint(saved_in)
    resumed = run_ranks(
        resumed_then_measured,
        resumed_in.world,
        str(tmp_path / "b"),
        str(model_dir),
        resumed_in,
        ckpt,
    )
    last = saved_in.pp - 1  # the reference: a rank of the last stage, which pools and holds r_CL
    ref = next(r for r in saved.values() if r["pp"] == last and r["tp"] == 0 and r["dp"] == 0)
    # same layout: exact; another layout: the fp32 bounds (sums in another order)
    tol = dict.fromkeys(FP32, 0.0) if saved_in == resumed_in else FP32
    errs = check_layout(resumed, ref, resumed_in, tol)
    print(
        f"\n[layouts] {saved_in.name} -> {resumed_in.name}: step 2 after the resume vs saved: {errs}"
    )
