# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""gpt-oss (NeMo-RL's grpo-gptoss-20b-8n8g-megatron.yaml) on CPU: attention sinks, sliding
windows and a biased MoE, imported by Megatron-Bridge's `gpt_oss_bridge.py`, against Hugging Face.

The model (`gptoss_model.tiny_gptoss_model`): hidden 64, 2 layers (layer 1 sliding with window 6,
layer 2 full: HF's `layer_types`, Megatron-Core's `window_attn_skip_freq: 2`), 4 heads / 2 KV
groups, 4 experts top-2, YaRN RoPE (gpt-oss's own parameters), sinks, router and biases drawn
non-zero. The rows of `scenario.batch` run to 40 tokens: the window cuts most of them.

The checks:
- the CPU attention (`SinkWindowAttention`) against HF's own `eager_attention_forward` under the
  mask HF's model builds for each layer type: padded rows (right padding, HF's padding mask) and
  the rows packed into one THD stream against each row alone;
- the model built by Bridge's AutoBridge (no NeMo-RL): logprobs and the mean of
  `find_final_norm`'s output over each row's response tokens against HF's (the mean of its last
  hidden state, after `model.norm`), padded and packed; fp32, bound 1e-5 (`test_real_worker`);
- NeMo-RL's own MegatronPolicyWorker with the CLIPO extension, built by NeMo-RL's `__init__`
  (Bridge's HF import, its checkpoint): `get_logprobs` with CLIPO off (before `clipo_setup`: no
  hook) bit-equal to CLIPO on, both equal HF's, and CLIPO's pooled rows equal HF's. The recipe
  runs `sequence_packing: enabled: false`: the CI case is padded; packed is `contract_full`;
- (`contract_full`) TP 2 + SP against TP 1 through `layouts.layout_methods` (logprobs, pooled
  rows, CLIPO's head step, one NeMo-RL `train` step): the sinks split by head over TP. A strict
  xfail: Megatron-Core reduces the experts' fc2 bias gradients twice at this layout (the comment
  at the test); `test_gptoss_tp2_sp_grad_norm_accounting` holds that, parameter by parameter.
Routing near-ties: the router runs in fp64 in NeMo-RL's recipe (`moe_router_dtype`), fp32 in HF;
a token whose 2nd and 3rd expert logits lie within ~1e-6 could route differently and break the
1e-5 bound without a bug. The tests assert the batch's smallest such gap (HF's routers) is above
1e-4, so a near-tie fails as one, never as a logprob error.

CPU stand-ins (debts; what each hides):
- `SinkWindowAttention` for TransformerEngine's fused attention (`softmax_type: learnable`, window
  (W - 1, 0), THD): TE's kernels, its handling of `cu_seqlens_q_padded` slots with windows, and
  the sink under CP are not run; CP > 1 with a window is refused here;
- `SequentialMLP` experts for TE's grouped GEMM (`moe_grouped_gemm: true` in Bridge's provider):
  the grouped GEMM's weight layout (`linear_fc1.weight<N>`) is mapped by Bridge but not loaded;
- no `bias_activation_fusion` (the fused clamped quick-GELU GLU `weighted_bias_quick_geglu_impl`):
  Megatron-Core's unfused `glu` runs the same formula; the fused kernel is not checked;
- the experts' fc2 returns a clone of its output (`gptoss_model.ExpertRowParallelLinear`):
  Megatron-Core's in-place bias add on a custom Function's view (`mlp.py:353`) fails `train` on
  the SequentialMLP path (GPU runs take TEGroupedMLP); a clone hides nothing numerically;
- `moe_permute_fusion` off (TE's permutation kernel); fp32 throughout (the recipe is bf16);
- the unit check's attention config is ours (`gptoss_checks.attention_pair`), built with Bridge's
  window formula; the model checks take Bridge's provider as it comes.
"""

from __future__ import annotations

import pytest
import torch

from clipo_testkit.nemo_rl.real_worker.build import requirements

pytestmark = [pytest.mark.nemo_rl]
# CI's set: the attention checks (under a second each) and the worker's padded case (the recipe's
# `sequence_packing: enabled: false`; about a minute); the rest is `contract_full`
FULL = pytest.mark.contract_full
BOUND = 1e-5  # fp32, test_real_worker's
ATTN_BOUND = 1e-6
ROUTER_GAP = 1e-4  # a token's 2nd and 3rd expert logits further apart than this (docstring)


@pytest.fixture(scope="module")
def gptoss_dir(tmp_path_factory):
    missing = requirements()
    if missing:
        pytest.skip(missing)
    from clipo_testkit.nemo_rl.real_worker.gptoss_model import tiny_gptoss_model
    from clipo_testkit.nemo_rl.real_worker.te_stub import import_bridge

    import_bridge()
    return tiny_gptoss_model(tmp_path_factory.mktemp("gptoss") / "model")


def _qkv(cfg, b: int, s: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, cfg.num_attention_heads, s, cfg.head_dim, generator=g)
    k, v = (torch.randn(b, cfg.num_key_value_heads, s, cfg.head_dim, generator=g) for _ in "kv")
    return q, k, v


def _ours(ours, q, k, v, **kw) -> torch.Tensor:
    """Megatron's layout in and out: [s, b, heads, hd] -> [b, s, heads, hd]."""
    mq, mk, mv = (t.permute(2, 0, 1, 3) for t in (q, k, v))
    out = ours(mq, mk, mv, kw.pop("attention_mask", None), **kw)
    return out.view(q.shape[2], q.shape[0], q.shape[1], q.shape[3]).transpose(0, 1)


@pytest.mark.parametrize("layer", [0, 1], ids=["sliding", "full"])
def test_sink_window_attention_matches_hf_eager(gptoss_dir, layer):
    """Padded rows (HF's padding mask handed to ours as Megatron's bool mask) and packed THD."""
    from megatron.core.packed_seq_params import PackedSeqParams

    from tests.nemo_rl.real_worker.gptoss_checks import attention_pair, hf_eager

    attn, ours, cfg = attention_pair(gptoss_dir, layer)
    assert (layer == 0) == (ours.window_left == cfg.sliding_window - 1)
    assert float(ours.softmax_offset.abs().min()) > 0  # sinks that a drop would show
    lens = [23, 9, 17]
    b, s = len(lens), max(lens)
    q, k, v = _qkv(cfg, b, s, seed=layer)
    pad = (torch.arange(s)[None] < torch.tensor(lens)[:, None]).long()
    with torch.no_grad():
        want = hf_eager(attn, cfg, q, k, v, pad)
        causal = torch.arange(s)[None, :] > torch.arange(s)[:, None]
        mask = (causal[None] | ~pad.bool()[:, None, :])[:, None]  # [b, 1, s, s], True = masked
        got = _ours(ours, q, k, v, attention_mask=mask)
        valid = pad.bool()
        padded_err = float((got - want)[valid].abs().max())
        # packed: the rows' valid tokens one after another, each slot against its row alone
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        psp = PackedSeqParams(
            qkv_format="thd",
            cu_seqlens_q=cu,
            cu_seqlens_kv=cu,
            cu_seqlens_q_padded=cu,
            cu_seqlens_kv_padded=cu,
            max_seqlen_q=s,
            max_seqlen_kv=s,
        )
        pq, pk, pv = (
            torch.cat([t[i : i + 1, :, :n] for i, n in enumerate(lens)], 2) for t in (q, k, v)
        )
        packed = _ours(ours, pq, pk, pv, packed_seq_params=psp)[0]
        alone = torch.cat(
            [
                hf_eager(attn, cfg, *(t[i : i + 1, :, :n] for t in (q, k, v)))[0]
                for i, n in enumerate(lens)
            ]
        )
        packed_err = float((packed - alone).abs().max())
        # the window and the sink matter on these lengths (a model without them is far off)
        no_sink = float(
            (want - hf_eager(_without_sinks(attn), cfg, q, k, v, pad))[valid].abs().max()
        )
        window, ours.window_left = ours.window_left, None  # the full layer's attention
        no_window = float((_ours(ours, q, k, v, attention_mask=mask) - want)[valid].abs().max())
        ours.window_left = window
    print(
        f"\n[gptoss] attention layer {layer}: padded {padded_err:.2e}, packed {packed_err:.2e}, "
        f"without the sink {no_sink:.2e}, without the window {no_window:.2e}"
    )
    assert padded_err <= ATTN_BOUND and packed_err <= ATTN_BOUND, (padded_err, packed_err)
    assert no_sink > 1e-2
    assert (no_window > 1e-2) == (layer == 0), no_window  # the window cuts these rows


def _without_sinks(attn):
    import copy

    other = copy.deepcopy(attn)
    with torch.no_grad():
        other.sinks.fill_(-1e9)
    return other


def _errors(got: dict, want: dict, rows=None) -> tuple[float, float]:
    rows = torch.arange(len(want["pooled"])) if rows is None else rows
    lp = float((got["logprobs"] - want["logprobs"][rows]).abs().max())
    pooled = float((got["pooled"] - want["pooled"][rows]).abs().max())
    return lp, pooled


@FULL
def test_bridge_gptoss_matches_hf(gptoss_dir):
    """Bridge's GPTModel (CPU spec) against HF: logprobs and CLIPO's pooled rows, padded and
    packed (module docstring)."""
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks
    from tests.nemo_rl.real_worker.gptoss_checks import bridge_forward, hf_reference

    out = run_ranks(bridge_forward, 1, str(gptoss_dir))[0]
    want = hf_reference(gptoss_dir, out["data"])
    errs = {mode: _errors(out[mode], want) for mode in ("padded", "packed")}
    print(
        f"\n[gptoss] Bridge vs HF (logprobs, pooled): {errs}; router gap {want['router_gap']:.2e}"
    )
    assert want["router_gap"] > ROUTER_GAP, f"a routing near-tie: {want['router_gap']}"
    for mode, (lp, pooled) in errs.items():
        assert lp <= BOUND and pooled <= BOUND, (mode, lp, pooled)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "packing", [False, pytest.param(True, marks=FULL)], ids=["padded", "packed"]
)
def test_worker_gptoss_clipo_on_equals_off(gptoss_dir, tmp_path, packing):
    """NeMo-RL's worker: CLIPO off == on bit for bit, both == HF, pooled == HF."""
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks
    from tests.nemo_rl.real_worker.gptoss_checks import hf_reference, worker_on_off

    out = run_ranks(worker_on_off, 1, str(tmp_path), str(gptoss_dir), packing)[0]
    assert "SinkWindowAttention" in out["attention"], out["attention"]
    calls = out["calls"]
    assert calls["all"] > 0 and calls["thd"] == (calls["all"] if packing else 0), calls
    assert torch.equal(out["on"], out["off"]), "CLIPO's capture changed the logprobs"
    import transformers

    from clipo_testkit.nemo_rl.real_worker import scenario

    tok = transformers.AutoTokenizer.from_pretrained(gptoss_dir)
    want = hf_reference(gptoss_dir, scenario.batch(tok.pad_token_id, len(tok)))
    lp = max(
        float((out["on"][j, 1:n] - want["logprobs"][row, 1:n]).abs().max())
        for j, (row, n) in enumerate(zip(out["rows"].tolist(), out["lengths"].tolist()))
    )
    pooled = float((out["pooled"] - want["pooled"][out["pooled_rows"]]).abs().max())
    print(
        f"\n[gptoss] NeMo-RL worker ({'packed' if packing else 'padded'}) vs HF: "
        f"logprobs {lp:.2e}, pooled {pooled:.2e}; CLIPO on == off"
    )
    assert want["router_gap"] > ROUTER_GAP, f"a routing near-tie: {want['router_gap']}"
    assert lp <= BOUND and pooled <= BOUND, (lp, pooled)


@pytest.fixture(scope="module")
def tp_runs(gptoss_dir, tmp_path_factory):
    """TP 1 (the default) and TP 2 + SP, each run once for the module (`test_layouts.Runs`),
    recording `grad_dump`'s per-parameter step."""
    from clipo_testkit.nemo_rl.real_worker.layouts import Layout
    from tests.nemo_rl.real_worker.test_layouts import Runs

    runs = Runs(gptoss_dir, tmp_path_factory, set())
    return lambda layout=None: runs.measured(layout or Layout(grads=True))


# Known gap (2026-12-04; `test_gptoss_tp2_sp_grad_norm_accounting` holds the explanation): at TP 2
# + SP, expert TP 1, EP 1, every expert's `linear_fc2.bias` gradient is twice TP 1's. Megatron-Core's
# RowParallelLinear marks its bias `sequence_parallel` for experts too (tensor_parallel/layers.py:
# 1456-1457, `allreduce=False` beside it), so `finalize_model_grads` sums it over TP
# (distributed/finalize_model_grads.py:452) after DDP has summed it over the expert-DP group, which
# at expert TP 1 / EP 1 is the TP ranks. NeMo-RL's reported grad norm is 14% high (1.7413 against
# 1.5235); Adam's first step is scale-free per element, so the step moves only through the clip
# coefficient of that norm (weights up to 3.4e-6 off, bound 1e-6). A GPU run of this layout with
# TE's grouped experts does the same (TE's GroupedLinear marks a "row" bias `sequence_parallel`;
# Megatron-Core hands it "row" when expert TP is 1 and EP is 1); the recipe's EP 8 hands TE no
# parallel mode, so its expert biases carry no such mark.
@pytest.mark.xfail(
    strict=True,
    reason="Megatron-Core sums the experts' fc2 bias gradients over TP after the expert-DP "
    "reduce at expert TP 1 / EP 1 + SP: grad norm 14% high, the clip with it (comment above)",
)
@FULL
@pytest.mark.slow
@pytest.mark.multiprocess
def test_gptoss_tp2_sp_equals_tp1(tp_runs):
    """The recipe's TP + SP in small (it runs TP 4 + SP, EP 8): `layouts.layout_methods` (logprobs
    with the pooler, CLIPO's head step, one NeMo-RL `train` step, logprobs again) at TP 2 + SP
    against TP 1, the MoE keys of `moe_model.moe_policy`; the sinks split by head over TP
    (Bridge's column mapping), each rank's heads with their own sink and its gradient."""
    from clipo_testkit.nemo_rl.real_worker.layouts import Layout
    from tests.nemo_rl.real_worker.moe_checks import check_all
    from tests.nemo_rl.real_worker.test_layouts import FP32

    layout = Layout(tp=2, sp=True, grads=True)
    ref, out = tp_runs(), tp_runs(layout)
    fine = FP32["norm_weight"]
    errs = check_all(out, ref, layout, FP32, shared=False, weights=fine, head=fine)
    print(f"\n[gptoss] {layout.name} vs TP 1: {errs}")


@FULL
@pytest.mark.slow
@pytest.mark.multiprocess
def test_gptoss_tp2_sp_grad_norm_accounting(tp_runs):
    """What the xfail above is, parameter by parameter (`grad_dump.accounting`): the reported
    norms are the parameters' shares; every gradient is TP 1's but the experts' `linear_fc2.bias`
    (exactly those: `allreduce=False` and `sequence_parallel`), at twice; the norm without that
    double count is TP 1's; the worker's step replays, and TP 2's gradients clipped by TP 1's
    norm step to TP 1's weights: the double count is the only difference."""
    from clipo_testkit.nemo_rl.real_worker.grad_dump import accounting
    from clipo_testkit.nemo_rl.real_worker.layouts import Layout
    from tests.nemo_rl.real_worker.test_layouts import FP32

    out = tp_runs(Layout(tp=2, sp=True, grads=True))
    res = accounting(out, tp_runs(), FP32["rel"], FP32["norm_weight"])
    print(f"\n[gptoss] tp2-sp grad norm accounting: {res}")
    want = [
        f"decoder.layers.{i}.mlp.experts.local_experts.{e}.linear_fc2.bias"
        for i in range(2)
        for e in range(4)
    ]
    assert res["doubled"] == want, res["doubled"]
    assert res["weights_err"] > res["weights_err_with_tp1_norm"]  # the clip moved the step
