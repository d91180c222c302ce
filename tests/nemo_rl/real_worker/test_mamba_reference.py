# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The CPU references of `clipo_testkit.mamba_reference` against Hugging Face NemotronH's torch path.

HF's `NemotronHMamba2Mixer.torch_forward` (the path HF runs without the kernels) is the reference:
its conv (`nn.Conv1d` + SiLU), its SSD chunked scan and its gated norm (`Zamba2RMSNormGated`,
gate before the norm). What the references stand in for, and so hide in a CPU run: the
causal-conv1d CUDA kernel, mamba_ssm's Triton `mamba_chunk_scan_combined`,
`mamba_split_conv1d_scan_combined` and `layernorm_gated.RMSNorm` -- their numerics (chunked fp32
accumulation order, bf16 state dtypes) are not checked here, only the math they implement.

The mixer is checked whole, both ways Megatron-Core's `MambaMixer` composes the kernels:
`_ssm_training` (the packed, memory-efficient path: split-conv-scan with the gate inside the
scan, then the norm without a gate) and `_static_prefill` (conv, scan, then norm(y, z)). Packed
rows (`seq_idx`) against HF run on each sequence alone. One difference from HF kept out on
purpose: HF's torch path clamps dt at `time_step_min` (1e-3), the kernels at `dt_limit`
((0, inf) as Megatron-Core calls them); the test sets the mixer's `time_step_min` to 0.

HF's torch path is wrong across chunks: its inter-chunk state passing sums over the wrong axis
(`decay_chunk ... .sum(dim=2)`, huggingface/transformers#34817, open; NemotronH copied Mamba2's
line). So HF runs with one chunk per sequence (`HF_CHUNK` > every length) while the references run
chunks of `CHUNK` tokens, and the scan is also held against the plain sequential recurrence
h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t, y_t = C_t h_t. `test_hf_multi_chunk_is_off` pins the
HF bug: when it turns red, HF is fixed and the single-chunk restriction (here and in the model
tests' configs) can go.
"""

from __future__ import annotations

import pytest
import torch

from clipo_testkit import mamba_reference as ref

pytestmark = [pytest.mark.nemo_rl]
nemotron_h = pytest.importorskip(
    "transformers.models.nemotron_h.modeling_nemotron_h",
    reason="Hugging Face NemotronH (transformers >= 5) is missing: run under scripts/test_nemo_rl.sh",
)
if not hasattr(nemotron_h.NemotronHMamba2Mixer, "torch_forward"):  # pragma: no cover - wrong env
    import transformers

    pytest.skip(
        f"transformers {transformers.__version__}'s NemotronH has no torch_forward (the kernel-free "
        "path was folded into forward); the reference is held against the transformers NeMo-RL's "
        "worker runs: run under scripts/test_nemo_rl.sh",
        allow_module_level=True,
    )

TOL = 2e-5  # fp32, activations O(1): summation-order differences only
CHUNK = 8  # the references' chunk: every check spans several
HF_CHUNK = 64  # HF's: one chunk per sequence (transformers#34817)


def _mixer(seed: int = 0, n_groups: int = 2, chunk: int = HF_CHUNK) -> torch.nn.Module:
    cfg = nemotron_h.NemotronHConfig(
        vocab_size=64, hidden_size=32, layers_block_type=["mamba"], ssm_state_size=8,
        mamba_num_heads=4, mamba_head_dim=8, n_groups=n_groups, conv_kernel=4,
        chunk_size=chunk, use_mamba_kernels=False, layer_norm_epsilon=1e-5,
    )  # fmt: skip
    torch.manual_seed(seed)
    mixer = nemotron_h.NemotronHMamba2Mixer(cfg, layer_idx=0).float()
    with torch.no_grad():
        for p in mixer.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        mixer.A_log.copy_(torch.rand_like(mixer.A_log) * 1.5 - 1.0)  # A in (-e^0.5, -e^-1)
        mixer.norm.weight.add_(1.0)
    mixer.time_step_min = 0.0
    return mixer


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def test_causal_conv1d_matches_hf_conv() -> None:
    mixer = _mixer()
    x = torch.randn(2, mixer.conv_dim, 21)  # [b, d, l]
    want = torch.nn.functional.silu(mixer.conv1d(x)[..., :21])
    w = mixer.conv1d.weight[:, 0, :]  # [d, w]
    got = ref.causal_conv1d_fn(x, w, mixer.conv1d.bias, activation="silu")
    assert _err(got, want) < TOL, _err(got, want)
    seq_idx = torch.tensor([[0] * 9 + [1] * 12, [0] * 21])  # row 0 packs two sequences
    packed = ref.causal_conv1d_fn(x, w, mixer.conv1d.bias, seq_idx, activation="silu")
    alone = torch.nn.functional.silu(mixer.conv1d(x[:1, :, 9:])[..., :12])
    assert _err(packed[:1, :, 9:], alone) < TOL and _err(packed[:1, :, :9], want[:1, :, :9]) < TOL
    state = torch.zeros(2, mixer.conv_dim, 4)
    steps = ref.causal_conv1d_update(x, state, w, mixer.conv1d.bias, activation="silu")
    assert _err(steps, want) < TOL


def test_gated_rmsnorm_matches_zamba2_norm() -> None:
    mixer = _mixer()
    y, z = torch.randn(3, 5, 32), torch.randn(3, 5, 32)
    norm = ref.RMSNormGated(32, eps=1e-5, group_size=32 // 2, norm_before_gate=False)
    norm.weight.data.copy_(mixer.norm.weight.data)
    assert _err(norm(y, z), mixer.norm(y, z)) < TOL
    # the training path: gate applied first (inside the scan), then the norm with no gate
    gated = y * torch.nn.functional.silu(z)
    assert _err(norm(gated), mixer.norm(y, z)) < TOL


def _megatron_training(
    mixer: torch.nn.Module, h: torch.Tensor, seq_idx: torch.Tensor | None
) -> torch.Tensor:
    """MambaMixer._ssm_training's composition: in_proj, split-conv-scan (gate inside), norm."""
    y = ref.mamba_split_conv1d_scan_combined(
        mixer.in_proj(h), mixer.conv1d.weight[:, 0, :], mixer.conv1d.bias, mixer.dt_bias.float(),
        -torch.exp(mixer.A_log.float()), mixer.D, CHUNK, seq_idx=seq_idx,
        headdim=mixer.head_dim, ngroups=mixer.n_groups, norm_before_gate=False,
    )  # fmt: skip
    norm = ref.RMSNormGated(
        y.shape[-1], 1e-5, y.shape[-1] // mixer.n_groups, norm_before_gate=False
    )
    norm.weight.data.copy_(mixer.norm.weight.data)
    return mixer.out_proj(norm(y))


def _megatron_prefill(mixer: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """MambaMixer._static_prefill's composition: conv, scan (no gate), norm(y, z)."""
    b, seqlen, _ = h.shape
    d, g, n, hd = mixer.intermediate_size, mixer.n_groups, mixer.ssm_state_size, mixer.head_dim
    z, xbc, dt = torch.split(mixer.in_proj(h), [d, d + 2 * g * n, mixer.num_heads], dim=-1)
    xbc = ref.causal_conv1d_fn(
        xbc.transpose(1, 2), mixer.conv1d.weight[:, 0, :], mixer.conv1d.bias, activation="silu"
    )
    x, B, C = torch.split(xbc.transpose(1, 2), [d, g * n, g * n], dim=-1)
    y = ref.mamba_chunk_scan_combined(
        x.reshape(b, seqlen, -1, hd), dt, -torch.exp(mixer.A_log.float()), B.reshape(b, seqlen, g, n),
        C.reshape(b, seqlen, g, n), CHUNK, D=mixer.D, dt_bias=mixer.dt_bias.float(),
        dt_softplus=True,
    )  # fmt: skip
    norm = ref.RMSNormGated(d, 1e-5, d // g, norm_before_gate=False)
    norm.weight.data.copy_(mixer.norm.weight.data)
    return mixer.out_proj(norm(y.reshape(b, seqlen, d), z))


@pytest.mark.parametrize("n_groups", [1, 2])
def test_mixer_paths_match_hf_torch_forward(n_groups: int) -> None:
    mixer = _mixer(seed=n_groups, n_groups=n_groups)
    h = torch.randn(2, 21, 32)  # 21 = 2 full chunks of 8 and a ragged one
    with torch.no_grad():
        want = mixer.torch_forward(h)
        errs = {
            "training": _err(_megatron_training(mixer, h, None), want),
            "prefill": _err(_megatron_prefill(mixer, h), want),
        }
    print(f"mamba mixer vs HF torch_forward (n_groups={n_groups}): {errs}")
    assert max(errs.values()) < TOL, errs


def test_packed_rows_match_each_sequence_alone() -> None:
    mixer = _mixer(seed=3)
    h = torch.randn(1, 27, 32)
    cuts = [0, 5, 19, 27]  # three sequences, one shorter than the conv and one across chunks
    seq_idx = torch.cat([torch.full((e - s,), i) for i, (s, e) in enumerate(zip(cuts, cuts[1:]))])[
        None
    ]
    with torch.no_grad():
        got = _megatron_training(mixer, h, seq_idx.int())
        want = torch.cat([mixer.torch_forward(h[:, s:e]) for s, e in zip(cuts, cuts[1:])], dim=1)
    print(f"packed mamba mixer vs HF per sequence: {_err(got, want):.3g}")
    assert _err(got, want) < TOL


def test_scan_matches_sequential_recurrence() -> None:
    torch.manual_seed(4)
    b, seqlen, h, p, g, n = 2, 21, 4, 8, 2, 8
    x, dt = torch.randn(b, seqlen, h, p), torch.rand(b, seqlen, h)
    A, B, C = -torch.rand(h) - 0.3, torch.randn(b, seqlen, g, n), torch.randn(b, seqlen, g, n)
    got, final = ref.mamba_chunk_scan_combined(x, dt, A, B, C, CHUNK, return_final_states=True)
    Bh, Ch = B.repeat_interleave(h // g, dim=2), C.repeat_interleave(h // g, dim=2)  # [b, l, h, n]
    state, ys = torch.zeros(b, h, p, n), []
    for t in range(seqlen):
        decay = torch.exp(dt[:, t] * A)[..., None, None]  # [b, h, 1, 1]
        state = state * decay + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append((state * Ch[:, t, :, None, :]).sum(-1))  # [b, h, p]
    errs = (_err(got, torch.stack(ys, dim=1)), _err(final, state))
    print(f"SSD chunked scan vs sequential recurrence (y, final state): {errs}")
    assert max(errs) < TOL, errs


def test_hf_multi_chunk_is_off() -> None:
    mixer, h = _mixer(seed=1, n_groups=1), torch.randn(1, 21, 32)
    with torch.no_grad():
        one_chunk = mixer.torch_forward(h)
        mixer.chunk_size = CHUNK
        chunked = mixer.torch_forward(h)
    assert _err(chunked, one_chunk) > 1e-2, "HF's chunked torch path is fixed: drop HF_CHUNK"
