# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO with multi-token prediction (MTP) on: NeMo-RL's own Megatron worker on the tiny
Nemotron-H of `test_hybrid_worker.py` with an MTP block ("*-", one depth repeated twice), imported
by Bridge's `NemotronHBridge` (its MTP mapping), `mtp_num_layers: 2` and the MTP loss
(`mtp_loss_scaling_factor: 0.3`) in the worker's megatron_cfg as the Nemotron 3 Super qa recipe
sets them (`hybrid_mtp_model.MTP_CFG`).

Hugging Face's NemotronH has no MTP module and `save_pretrained` writes no MTP weight: the MTP
weights in the checkpoint are random tensors added by `hybrid_mtp_model.tiny_hybrid_mtp_model`
under the names and shapes Bridge's mapping expects. HF's forward is the main head only.

Checked: NeMo-RL's `get_logprobs` equals HF's forward logprobs (the main head; the MTP block runs
in Megatron's forward and leaves them alone); the rows CLIPO pools equal the mean of HF's
`model.norm_f` output over each row's response tokens (the hook is on the MAIN decoder's final
norm, `decoder.final_norm`, not an MTP layer's `final_layernorm`); CLIPO on vs off: logprobs
bit-equal; CLIPO's head step; one NeMo-RL `train` step with the MTP loss on and NeMo-RL's GRPO
loss (`ClippedPGLossFn`) on advantages of r + r_CL (the head step's rewards), whose MTP metrics
are reported and MTP weights move. Every MTP weight Bridge imported equals the
checkpoint's tensor (an unmapped weight would be left as allocated).

What stands in on CPU (`hybrid_mtp_model.cpu_mtp_stand_ins` says why, file:line at the pins): as
in test_hybrid_worker.py (the Mamba kernels' torch references, the local hybrid spec with torch
norms and packed SDPA attention), also inside the MTP block, whose ModelOpt `Norm`s (TE-only) are
torch norms; Megatron-Core's `is_inference_column_parallel_linear` answers False (without TE its
classes are Mocks and `isinstance` raises); Bridge's MTP mapping gets the separate-norm alias of
the MTP attention's input norm that it makes for `AutoMapping`s only. Not run: TP / SP / CP / PP
with MTP, bf16, an MoE layer inside the MTP block (Super's pattern), `mtp_detach_heads: true`.

Seen (2026-12-04, NeMo-RL 7ea279a, fp32): logprobs 6.1e-7, pooled 4.8e-7, hooked
`decoder.final_norm`; every MTP weight as the checkpoint holds it (0); the GRPO train step: loss
-0.0479, grad norm 1.3972, mtp_1_loss 4.6498, mtp_2_loss 4.6555, 10 of 10 MTP tensors moved.
Seen red (find_final_norm returning the first MTP layer's `final_layernorm`, then restored): 1
failed: the hook fires once per MTP depth (the repeated layer runs twice per forward), the
pooler's second call raises "final-norm hook fired with no pending microbatch".
"""

from __future__ import annotations

import math
import os

import pytest
import torch

from clipo_testkit.nemo_rl.real_worker.build import requirements

pytestmark = [
    pytest.mark.nemo_rl,
    pytest.mark.slow,
    pytest.mark.multiprocess,
    pytest.mark.contract_full,
]
TOL = 1e-5  # fp32


@pytest.fixture(scope="module")
def sources():
    missing = requirements()
    if missing:
        pytest.skip(missing)
    os.environ["NEMO_RL_ROOT"] = os.environ["NEMO_RL_SRC"]


def test_mtp_worker_matches_hf_and_trains(sources, tmp_path):
    import transformers

    from clipo_testkit.nemo_rl.real_worker import scenario
    from clipo_testkit.nemo_rl.real_worker.hybrid_mtp_model import (
        MTP_CFG,
        imported_mtp_error,
        mtp_worker_run,
        tiny_hybrid_mtp_model,
    )
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks
    from tests.nemo_rl.real_worker.test_hybrid_worker import hf_reference

    model_dir = tiny_hybrid_mtp_model(tmp_path / "model")
    r = run_ranks(mtp_worker_run, 1, str(tmp_path), str(model_dir))[0]
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    data = scenario.batch(tok.pad_token_id, len(tok))
    ref = hf_reference(model_dir, data)

    lp_err = 0.0
    for j, row in enumerate(r["rows"].tolist()):
        n = int(r["lengths"][j])
        lp_err = max(
            lp_err, float((r["on"][j, 1:n].double() - ref["logprobs"][row, 1:n]).abs().max())
        )
    assert sorted(r["pooled_rows"].tolist()) == sorted(r["rows"].tolist())
    perr = float((r["pooled"] - ref["pooled"][r["pooled_rows"]]).abs().max())
    mtp_err = imported_mtp_error(r["mtp_before"], model_dir)
    train = r["train"]
    print(
        f"\n[hybrid MTP] {r['mtp_config']} hooked {r['hooked']}: logprobs {lp_err:.3g}, "
        f"pooled {perr:.3g}; {len(r['mtp_before'])} MTP tensors imported ({mtp_err:.3g}), "
        f"{r['mtp_moved']} moved; head {r['head_metrics']}; train {train}"
    )
    assert r["mtp_config"] == MTP_CFG, r["mtp_config"]
    assert torch.equal(r["on"], r["off"])  # CLIPO on vs off: bit-equal
    assert lp_err <= TOL and perr <= TOL, (lp_err, perr)
    assert mtp_err == 0.0, mtp_err  # every MTP tensor from the checkpoint, none as allocated
    assert r["mtp_moved"] > 0
    assert r["advantages"].abs().sum() > 0 and r["head_metrics"]["clipo/head_updated"] == 1.0
    mtp = train["mtp_metrics"]
    losses = [mtp.get(f"mtp_{i}_loss") for i in (1, 2)]
    assert all(v is not None and math.isfinite(v) and v > 0 for v in losses), mtp
    assert math.isfinite(train["loss"]) and math.isfinite(train["grad_norm"]), train
