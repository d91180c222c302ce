# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Qwen3.5 (gated DeltaNet + gated attention, through its vision-language wrapper) on CPU: the
class NeMo-RL's Qwen3.5 recipes name (`Qwen3_5ForConditionalGeneration`), imported by Megatron-
Bridge (`qwen35_vl_bridge.py`) into its Qwen3VLModel, against Hugging Face's own model.

The model (`qwen35_model.tiny_qwen35_model`): hidden 64, 8 layers, `layer_types` 3 x linear
attention (gated DeltaNet) + 1 x full attention, twice; a 1-block vision encoder; HF random
weights with the zero-centred norms drawn (not HF's zeros). Text-only rows.

- model level: Bridge's import and weight load, one forward: logprobs equal HF's, and the output of
  `find_final_norm` on the Qwen3VLModel (`language_model.decoder.final_layernorm`) pooled over each
  row's response tokens equals the mean of HF's final-norm output there;
- worker level: NeMo-RL's MegatronPolicyWorker with the CLIPO extension (NeMo-RL's real __init__
  through Bridge), get_logprobs with CLIPO off and on (the pooler): bit-equal; logprobs and pooled
  rows against HF. Unpacked: the Qwen3.5 dense recipe (`grpo-qwen3.5-9b-1n8g-megatron.yaml`) sets
  `sequence_packing.enabled: false`; packed (the MoE recipes pack, through the model's own packing
  under CP) is `contract_full`.

What stands in on CPU, and what each hides:
- FLA's Triton kernels (causal_conv1d, l2norm, chunk_gated_delta_rule) -> `clipo_testkit.
  gdn_reference` (fp32 torch, recurrent form; `test_gdn_kernels` holds them against HF's torch
  path): FLA's chunked bf16 numerics, and its packed (`cu_seqlens`) kernel, are not run;
- TransformerEngine's modules -> torch / Megatron-Core local ones (`qwen35_model`): the fused
  norm + linear (`TELayerNormColumnParallelLinear` -> norm then ColumnParallelLinear, TE's parameter
  names), TENorm (zero-centred gamma), TE's core attention (SDPA with the packed mask,
  `thd_attention`): TE's kernels and its attention-mask conventions beyond the causal one are not
  run; the vision encoder is built the same way but never run (text rows only);
- Megatron-Core's TE-only backend choice for the hybrid block (`_get_backend_spec_provider`,
  `get_gpt_layer_with_transformer_engine_spec`) is redirected to a CPU BackendSpecProvider while the
  spec is built: the per-layer layout (which layer is GDN, which attention) is Megatron-Core's own.

Tolerance: 1e-5 (fp32; measured errors are printed). CI's set: `test_nemo_rl_worker_clipo_on_off
[unpacked]`; the model-level case and the packed one are `contract_full`.

Mutations seen red (final_norm.py, each restored): the pooled rows from a non-final layer
(`decoder.layers[-2]`): "assert 1.439148336648941 < 1e-05" (pooled_err); the hook on the vision
model's decoder: "RuntimeError: 1 microbatches were read but never reached the final norm".
"""

from __future__ import annotations

import pytest

from clipo_testkit.nemo_rl.real_worker.build import requirements
from clipo_testkit.nemo_rl.real_worker.qwen35_model import tiny_qwen35_model

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow, pytest.mark.multiprocess]

TOL = 1e-5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    missing = requirements()
    if missing:
        pytest.skip(missing)
    return tiny_qwen35_model(tmp_path_factory.mktemp("qwen35") / "model")


@pytest.mark.contract_full  # CI's set holds the worker's unpacked case (~110 s), which covers this
def test_bridge_qwen3vl_model_matches_hf(model_dir):
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks
    from tests.nemo_rl.real_worker.qwen35_checks import model_level

    out = run_ranks(model_level, 1, str(model_dir))[0]
    print(f"\n[qwen3.5 model] {out}")
    assert out["gdn_layers"] == 6
    assert out["norm_is_language_final"]
    assert out["lp_err"] < TOL, out
    assert out["pooled_err"] < TOL, out


@pytest.mark.parametrize(
    "packing",
    [False, pytest.param(True, marks=pytest.mark.contract_full)],
    ids=["unpacked", "packed"],
)
def test_nemo_rl_worker_clipo_on_off(model_dir, tmp_path, packing):
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks
    from tests.nemo_rl.real_worker.qwen35_checks import worker_level

    out = run_ranks(worker_level, 1, str(tmp_path), str(model_dir), packing)[0]
    print(f"\n[qwen3.5 worker] {out}")
    assert out["packing"] is packing
    # packed: the GDN kernels get NeMo-RL's cu_seqlens (several rows a call); unpacked: one row
    assert (out["gdn_max_segments"] > 1) is packing, out
    assert out["bit_equal"], "CLIPO on changed the logprobs"
    assert out["lp_err"] < TOL, out
    assert out["pooled_err"] < TOL, out
