# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own Megatron worker with the CLIPO extension on a hybrid Mamba-2 + attention + MLP
policy (the Nemotron-H / Nemotron 3 Nano family: Megatron-Core's `HybridModel`), imported by
Bridge's `NemotronHBridge` from a tiny Hugging Face `NemotronHForCausalLM` (`hybrid_model.py`).

Checked: NeMo-RL's `get_logprobs` (packed sequences, as the recipes run) equals HF's forward
logprobs row by row; the rows CLIPO pools equal the mean of HF's `model.norm_f` output (a forward
hook) over each row's response tokens; CLIPO on vs off: logprobs bit-equal.

What stands in on CPU, and so is not checked here:
- the Mamba kernels: causal-conv1d's `causal_conv1d_fn`, mamba_ssm's Triton
  `mamba_split_conv1d_scan_combined` / `mamba_chunk_scan_combined` and `layernorm_gated.RMSNorm`
  are `clipo_testkit.mamba_reference`'s torch references (held against HF's torch path in
  `test_mamba_reference.py`); their GPU numerics (bf16 states, chunked accumulation) are not;
- the mixer's packing check (installed versions of mamba_ssm / causal-conv1d) is answered yes;
- TE: Megatron-Core's local hybrid spec (Column/RowParallelLinear) with torch norms (HybridStack's
  final `TENorm` too) and the packed SDPA attention of `thd_attention` (the Llama tests' stand-ins);
- HF's side runs one Mamba chunk per row (chunk 128 > every length): HF's torch path is wrong
  across chunks (huggingface/transformers#34817; `test_mamba_reference.test_hf_multi_chunk_is_off`).
Megatron's scan sees the packed rows whole (seq_idx resets the state per sequence).

Seen red (find_final_norm mutated for HybridStack, then restored): the hook on the last Mamba
layer (`decoder.layers.2`): pooled error 1.36; on the last layer's output before the final norm
(`decoder.layers.3`): 1.36; logprobs stay at 6.1e-7 in both (the capture does not touch them).
"""

from __future__ import annotations

import os

import pytest
import torch

from clipo_testkit.nemo_rl.real_worker.build import requirements

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow, pytest.mark.multiprocess]
TOL = 1e-5  # fp32


@pytest.fixture(scope="module")
def sources():
    missing = requirements()
    if missing:
        pytest.skip(missing)
    os.environ["NEMO_RL_ROOT"] = os.environ["NEMO_RL_SRC"]


@torch.no_grad()
def hf_reference(model_dir, data) -> dict[str, torch.Tensor]:
    """Per row: HF's token logprobs and the mean of `model.norm_f`'s output over the response."""
    import transformers

    from clipo_testkit.nemo_rl.real_worker import scenario

    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    seen: list[torch.Tensor] = []
    hook = hf.model.norm_f.register_forward_hook(lambda _m, _i, out: seen.append(out))
    lp = torch.zeros(data["input_ids"].shape, dtype=torch.float64)
    pooled = []
    try:
        for i in range(scenario.B):
            n = int(data["input_lengths"][i])
            ids = data["input_ids"][i : i + 1, :n]
            seen.clear()
            logits = hf(ids).logits[0, :-1].double()
            lp[i, 1:n] = logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
            pooled.append(seen[-1][0][data["token_mask"][i, :n].bool()].mean(0))
    finally:
        hook.remove()
    return {"logprobs": lp, "pooled": torch.stack(pooled)}


@pytest.mark.parametrize("world", [1], ids=["dp1"])
def test_hybrid_worker_matches_hf(sources, tmp_path, world):
    import transformers

    from clipo_testkit.nemo_rl.real_worker import scenario
    from clipo_testkit.nemo_rl.real_worker.hybrid_model import hybrid_logprobs, tiny_hybrid_model
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks

    model_dir = tiny_hybrid_model(tmp_path / "model")
    res = run_ranks(hybrid_logprobs, world, str(tmp_path), str(model_dir))
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    data = scenario.batch(tok.pad_token_id, len(tok))
    ref = hf_reference(model_dir, data)
    lp_err = perr = 0.0
    for rank, r in res.items():
        assert torch.equal(r["on"], r["off"]), rank  # CLIPO on vs off: bit-equal
        for j, row in enumerate(r["rows"].tolist()):
            n = int(r["lengths"][j])
            lp_err = max(
                lp_err, float((r["on"][j, 1:n].double() - ref["logprobs"][row, 1:n]).abs().max())
            )
        assert sorted(r["pooled_rows"].tolist()) == sorted(r["rows"].tolist())
        perr = max(perr, float((r["pooled"] - ref["pooled"][r["pooled_rows"]]).abs().max()))
    print(
        f"\n[hybrid worker] world={world} hooked {res[0]['hooked']}: logprobs {lp_err:.3g}, pooled {perr:.3g}"
    )
    assert lp_err <= TOL and perr <= TOL, (lp_err, perr)
