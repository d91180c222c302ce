# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Qwen3.5 MoE (gated DeltaNet + gated attention layers, each with an MoE MLP, through Bridge's
Qwen3VLModel) on CPU: the architecture of NeMo-RL's Qwen3.5 MoE recipes
(`grpo-qwen3.5-35ba3b-2n8g-megatron-ep16tp2*.yaml`, `grpo-qwen3.5-397ba17b-32n8g-megatron.v2.yaml`:
`Qwen3_5MoeForConditionalGeneration`), imported by Megatron-Bridge's `Qwen35VLMoEBridge`, against
Hugging Face's own model.

The model (`qwen35_moe_model`): `test_qwen35`'s layout (hidden 64, 8 layers, 3 gated DeltaNet + 1
gated attention, twice; a 1-block ViT, text rows only), every MLP Qwen3.5-MoE's sparse block:
4 routed experts, top-2, one shared expert behind its sigmoid gate; HF random weights, the
zero-centred norms and the routers drawn. Checks (`qwen35_checks`, as `test_qwen35`):
- model level: Bridge's import, one forward: logprobs equal HF's; the output of `find_final_norm`
  (`language_model.decoder.final_layernorm`) pooled over each row's response tokens equals the
  mean of HF's `model.language_model.norm` output there; every layer is Megatron-Core's MoELayer
  with SequentialMLP experts and a gated SharedExpertMLP;
- worker level: NeMo-RL's MegatronPolicyWorker with the CLIPO extension (NeMo-RL's real __init__
  through Bridge; the MoE keys of `moe_model.moe_policy` at EP 1), get_logprobs with CLIPO off and
  on: bit-equal; logprobs and pooled rows against HF. Packed (the MoE recipes pack, through the
  model's own packing) and unpacked.
Routing near-ties: the router runs in fp64 in the worker (`moe_router_dtype`), fp32 in HF; every
check asserts the smallest gap between a token's 2nd and 3rd router logit over all layers is above
1e-4 (`ROUTER_GAP`), so a near-tie fails as one, never as a logprob error.

What stands in on CPU: `test_qwen35`'s (FLA's kernels -> `clipo_testkit.gdn_reference`, TE's
modules -> torch / Megatron-Core local ones), and for the MoE MLP: SequentialMLP for TE's grouped
GEMM (`te_cpu_modules.CpuBackend.grouped_mlp_modules`), `moe_permute_fusion` off (a TE kernel);
the token dispatcher is the recipes' `alltoall` at EP 1. Expert parallelism itself is
`test_moe_layouts`' (GPTModel), not run here.

Tolerance: 1e-5 (fp32). All `contract_full`. Passed (2026-12-04, the three cases 8 min 20 s on a
loaded 2-core box): model level logprobs 1.7e-7, pooled 3.0e-7, router gap 6.8e-3; worker packed
logprobs 5.2e-7, pooled 3.3e-7 (8 rows a GDN kernel call); unpacked 5.2e-7 / 3.6e-7; router gap
over the worker's batch 4.6e-4; CLIPO on == off bit-equal both ways.

Mutations seen red (final_norm.py `_norm_of` returning a layer for the Qwen3VL text model, each
restored): the hook on the last decoder layer (`decoder.layers[-1]`, the residual stream before the
final norm): model level red (`norm_is_language_final` False; pooled 1.94), worker `[packed]` red
("assert 2.101795956492424 < 1e-05", pooled_err; logprobs unchanged, 5.2e-7); pooled rows from a
non-final layer (`decoder.layers[-2]`): worker `[packed]` red ("assert 2.1224395986646414 < 1e-05").
"""

from __future__ import annotations

import pytest

from clipo_testkit.nemo_rl.real_worker.build import requirements
from clipo_testkit.nemo_rl.real_worker.qwen35_moe_model import tiny_qwen35_moe_model

pytestmark = [
    pytest.mark.nemo_rl,
    pytest.mark.slow,
    pytest.mark.multiprocess,
    pytest.mark.contract_full,
]

TOL = 1e-5
ROUTER_GAP = 1e-4
MOE_LAYER = "MoELayer/SequentialMLP/SharedExpertMLP+gate"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    missing = requirements()
    if missing:
        pytest.skip(missing)
    return tiny_qwen35_moe_model(tmp_path_factory.mktemp("qwen35moe") / "model")


def test_bridge_qwen35_moe_model_matches_hf(model_dir):
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks
    from tests.nemo_rl.real_worker.qwen35_checks import model_level

    out = run_ranks(model_level, 1, str(model_dir))[0]
    print(f"\n[qwen3.5-moe model] {out}")
    assert out["router_gap"] > ROUTER_GAP, f"a routing near-tie: {out['router_gap']}"
    assert out["gdn_layers"] == 6
    assert out["moe_layers"] == [MOE_LAYER] * 8, out["moe_layers"]
    assert out["norm_is_language_final"]
    assert out["lp_err"] < TOL, out
    assert out["pooled_err"] < TOL, out


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "unpacked"])
def test_nemo_rl_worker_qwen35_moe_clipo_on_off(model_dir, tmp_path, packing):
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks
    from tests.nemo_rl.real_worker.qwen35_checks import worker_level

    out = run_ranks(worker_level, 1, str(tmp_path), str(model_dir), packing)[0]
    print(f"\n[qwen3.5-moe worker] {out}")
    assert out["router_gap"] > ROUTER_GAP, f"a routing near-tie: {out['router_gap']}"
    assert out["packing"] is packing
    assert out["model_class"] == "Qwen3VLModel", out
    # packed: the GDN kernels get NeMo-RL's cu_seqlens (several rows a call); unpacked: one row
    assert (out["gdn_max_segments"] > 1) is packing, out
    assert out["bit_equal"], "CLIPO on changed the logprobs"
    assert out["lp_err"] < TOL, out
    assert out["pooled_err"] < TOL, out
