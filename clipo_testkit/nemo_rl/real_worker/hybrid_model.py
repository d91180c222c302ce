# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A tiny Nemotron-H (the hybrid family of NeMo-RL's Nemotron-H / Nemotron 3 Nano recipes) for
NeMo-RL's real worker on CPU, and the CPU stack spec Bridge's `HybridModelProvider` builds it with.

The model: Hugging Face `NemotronHForCausalLM`, random weights, layers Mamba-2, attention, Mamba-2,
MLP (pattern "M*M-"), hidden 64, the project's character tokenizer; imported by Bridge's
`NemotronHBridge` into Megatron-Core's `HybridModel`, as NeMo-RL imports a recipe's model.

What stands in on CPU (the test module's docstring holds the record):
- the Mamba kernels (causal-conv1d, mamba_ssm's Triton scan and gated norm): the torch references
  of `clipo_testkit.mamba_reference`, bound into `megatron.core.ssm.mamba_mixer` (`bind_kernels`);
- the stack spec: Megatron-Core's own local (non-TE) hybrid spec (ModelOpt's
  `get_hybrid_stack_modelopt_spec`: Column/RowParallelLinear) with torch norms and the packed
  SDPA attention of `thd_attention` in place of TE's; HybridStack's final `TENorm`: `cpu_patches`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from clipo_testkit.nemo_rl.inspection import head_state

PATTERN = ["mamba", "attention", "mamba", "mlp"]  # HF's layers_block_type ("M*M-")
HF_CHUNK = 128  # > every row's length: HF's torch path is wrong across chunks (transformers#34817)


def hybrid_config(tok, *, pattern=PATTERN, hidden: int = 64, chunk: int = HF_CHUNK, **overrides):
    """An HF NemotronHConfig of the tiny shape; `pattern` may hold "moe" layers (Nemotron 3 Nano's
    "E": 4 routed experts, top-2, a shared expert, the sigmoid router with its expert bias)."""
    import transformers

    shape = dict(ssm_state_size=16, mamba_num_heads=8) | overrides
    return transformers.NemotronHConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        layers_block_type=list(pattern),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=2 * hidden,
        mamba_head_dim=16,
        n_groups=2,
        conv_kernel=4,
        chunk_size=chunk,
        use_mamba_kernels=False,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        moe_intermediate_size=hidden,
        moe_shared_expert_intermediate_size=hidden,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **shape,
    )


def tiny_hybrid_model(path: Path, *, hidden: int = 64, seed: int = 0) -> Path:
    """A random tiny NemotronH causal LM + the project's character tokenizer, saved for AutoBridge."""
    import transformers

    from clipo_testkit.tiny_models import char_tokenizer

    if (path / "config.json").exists():
        return path
    tok = char_tokenizer()
    config = hybrid_config(tok, hidden=hidden)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).float()
    with torch.no_grad():  # HF's init leaves D = 1, norms at 1, A_log = log(1..h): draw them
        for name, p in model.named_parameters():
            if name.endswith((".D", "norm.weight", "norm_f.weight")):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith(".A_log"):
                p.copy_(torch.rand_like(p) * 1.5 - 1.0)
    model.eval().save_pretrained(path)
    hub_checkpoint(path)
    tok.save_pretrained(path)
    return path


def hub_checkpoint(path: Path) -> None:
    """A saved NemotronH made what Bridge imports as the kernels compute: the hub's key names
    (`_hub_key_names`), and dt clamped at 0 -- HF's torch path clamps dt at time_step_min (its
    init's lower bound); the kernels, as Megatron-Core calls them, at dt_limit (0, inf)."""
    import json

    _hub_key_names(path)
    file = path / "config.json"
    config = json.loads(file.read_text())
    config["time_step_min"] = 0.0
    file.write_text(json.dumps(config, indent=2))


def _reference_mixer_forward(self, hidden_states, *_a, **_k):
    """HF's Mamba-2 mixer computed from `mamba_reference`'s pieces (the conv, the SSD chunked
    scan over the whole batch at once, the gated norm), as Megatron-Core's training path composes
    the kernels: exact across chunks and memory-light, for fine-tuning on rows longer than HF's
    torch path can afford in one chunk. Right-padded rows, no cache."""
    import torch.nn.functional as F

    from clipo_testkit import mamba_reference as ref

    d, g, n, h = self.intermediate_size, self.n_groups, self.ssm_state_size, self.num_heads
    z, xbc, dt = torch.split(self.in_proj(hidden_states), [d, d + 2 * g * n, h], dim=-1)
    xbc = ref.causal_conv1d_fn(
        xbc.transpose(1, 2), self.conv1d.weight[:, 0, :], self.conv1d.bias, activation="silu"
    ).transpose(1, 2)
    x, B, C = torch.split(xbc, [d, g * n, g * n], dim=-1)
    b, s = x.shape[:2]
    dt = F.softplus(dt + self.dt_bias).clamp(min=0.0)  # [b, s, h]
    x = x.reshape(b, s, h, -1)
    B, C = (t.reshape(b, s, g, n).repeat_interleave(h // g, dim=2) for t in (B, C))
    A = -torch.exp(self.A_log.float())
    y, _ = ref.ssd_minimal(x * dt[..., None], A * dt, B, C, 128)
    y = (y + x * self.D[:, None]).reshape(b, s, d) * F.silu(z)
    eps = getattr(self.norm, "variance_epsilon", 1e-5)
    return self.out_proj(ref.rmsnorm_gated(y, self.norm.weight, None, eps, d // g, False))


@contextlib.contextmanager
def hf_mixer_on_reference():
    """HF NemotronH's Mamba-2 mixers run `_reference_mixer_forward` inside the block."""
    from transformers.models.nemotron_h import modeling_nemotron_h as hf

    original = hf.NemotronHMamba2Mixer.forward
    hf.NemotronHMamba2Mixer.forward = _reference_mixer_forward
    try:
        yield
    finally:
        hf.NemotronHMamba2Mixer.forward = original


def _hub_key_names(path: Path) -> None:
    """transformers 5.8.1 saves the word embeddings as `backbone.embedding.weight` (its rename
    rule for nemotron_h, reversed); the hub's Nemotron-H checkpoints, and Bridge's mapping, name
    them `backbone.embeddings.weight`. Bridge finds no source for the Megatron embedding then and
    leaves it as allocated (|w| ~ 1e35 seen): the file is written in the hub's names (HF loads
    both)."""
    from safetensors.torch import load_file, save_file

    file = path / "model.safetensors"
    state = load_file(file)
    state["backbone.embeddings.weight"] = state.pop("backbone.embedding.weight")
    save_file(state, file, metadata={"format": "pt"})


def is_hybrid(model_dir: Path) -> bool:
    import json

    return (
        json.loads((Path(model_dir) / "config.json").read_text()).get("model_type") == "nemotron_h"
    )


def bind_kernels() -> None:
    """The CPU references into Megatron-Core's MambaMixer namespace (idempotent)."""
    import megatron.core.ssm.mamba_mixer as mamba_mixer

    from clipo_testkit.mamba_binding import bind_into

    if not getattr(mamba_mixer, "_clipo_cpu_reference", False):
        bind_into(mamba_mixer)
        mamba_mixer._clipo_cpu_reference = True


def cpu_hybrid_stack_spec(config=None, *_args, **_kwargs):
    """Megatron-Core's local hybrid stack spec with torch norms and the packed SDPA attention (a
    provider's `hybrid_stack_spec` callable; Bridge serialises its import path)."""
    from megatron.core.post_training.modelopt.hybrid.model_specs import (
        get_hybrid_stack_modelopt_spec,
    )

    from clipo_testkit.nemo_rl.real_worker.thd_attention import (
        ContextParallelSDPAAttention,
        SequenceParallelTorchNorm,
    )

    bind_kernels()
    spec = get_hybrid_stack_modelopt_spec(local_core_attention=True, remap_te_layernorm=False)
    sub = spec.submodules
    sub.mamba_layer.submodules.norm = SequenceParallelTorchNorm
    attn = sub.attention_layer.submodules
    attn.input_layernorm = SequenceParallelTorchNorm
    attn.self_attention.submodules.core_attention = ContextParallelSDPAAttention
    for layer in (sub.mlp_layer, sub.moe_layer):
        layer.submodules.pre_mlp_layernorm = SequenceParallelTorchNorm
    return spec


def hybrid_logprobs(rank: int, world: int, out_dir: str, model_dir: str) -> dict:
    """One rank: NeMo-RL's worker on the hybrid model; get_logprobs with CLIPO off, then on (the
    pooler hooked by `clipo_setup`), on the driver's packed shard of `scenario.batch`."""
    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY
    from clipo_testkit.nemo_rl.real_worker import build, scenario

    bind_kernels()
    policy = build.contract_policy(Path(model_dir), Path(out_dir), dp=world)
    worker = build.build_worker(policy, dp=world)
    data = scenario.batch(worker.tokenizer.pad_token_id, len(worker.tokenizer))
    shards, _ = data.shard_by_batch_size(
        world, batch_size=None, sequence_packing_args=scenario.packing_args(policy)
    )
    shard = shards[rank]
    off = worker.get_logprobs(data=shard)["logprobs"].clone()
    worker.clipo_setup(clipo_cfg=scenario.CLIPO)
    on = worker.get_logprobs(data=shard)["logprobs"].clone()
    return {
        "rows": shard[SAMPLE_IDX_KEY].clone(),
        "lengths": shard["input_lengths"].clone(),
        "off": off,
        "on": on,
        "pooled_rows": head_state(worker).rows.cpu().clone(),
        "pooled": head_state(worker).pooled.detach().cpu().clone(),
        "hooked": hooked_name(worker),
    }


def hooked_name(worker) -> str:
    """Where CLIPO's capture hooks: the module name of `find_final_norm` in the worker's model."""
    from megatron.core.utils import unwrap_model

    from clipo_megatron.megatron.pooling.final_norm import find_final_norm

    norm = find_final_norm(worker.model)
    chunks = unwrap_model(list(worker.model) if isinstance(worker.model, list) else [worker.model])
    names = [n for c in chunks for n, m in c.named_modules() if m is norm]
    return f"{names[0] if names else '?'} ({type(norm).__name__})"
