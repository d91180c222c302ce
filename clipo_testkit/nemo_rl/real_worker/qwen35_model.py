# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A tiny Qwen3.5 (`Qwen3_5ForConditionalGeneration`, the class NeMo-RL's Qwen3.5 recipes name) and
what Megatron-Bridge's Qwen3.5 provider (`qwen35_vl_provider.py`) needs to build its Qwen3VLModel on
CPU. Test code.

The provider builds TransformerEngine modules only: the language block through Megatron-Core's
`get_transformer_block_with_experimental_attention_variant_spec` (`_get_backend_spec_provider`:
TESpecProvider, nothing else), and Qwen3VLModel builds its vision encoder itself (`model.py`) from
`get_vit_layer_with_transformer_engine_spec` and TE's norm / linears for the patch merger.
`cpu_qwen35_patches` (module globals, for the duration of a build and its forwards) replaces:
- the language block (Bridge's `_qwen35_build_language_block_spec`): Megatron-Core's own hybrid
  per-layer builder (`get_transformer_layer_with_experimental_attention_variant_spec`: GatedDeltaNet
  where `linear_attention_freq` says, gated attention elsewhere) with `CpuBackend`, a
  BackendSpecProvider of torch modules, and Bridge's own `_patch_standard_attention_specs`;
- TE classes left in a spec (Megatron-Core's TE attention spec, the ViT spec) swapped by `cpu_spec`.
The GatedDeltaNet's FLA kernels: `clipo_testkit.gdn_reference` (bound by the caller).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

from clipo_testkit.nemo_rl.real_worker.te_cpu_modules import (
    CpuBackend,
    CpuNorm,
    column_parallel_linear,
    core_attention,
    cpu_spec,
)

LAYER_TYPES = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 2


def tiny_qwen35_model(path: Path, *, hidden: int = 64, seed: int = 0) -> Path:
    """A random tiny Qwen3_5ForConditionalGeneration + the project's character tokenizer (8
    layers: 3 gated DeltaNet + 1 gated attention, twice, as Qwen3.5's `layer_types`), saved."""
    import transformers

    from clipo_testkit.tiny_models import char_tokenizer

    if (path / "config.json").exists():
        return path
    tok = char_tokenizer()
    n = len(tok)  # the vision ids sit past the tokenizer's vocabulary: no text row holds one
    text = dict(
        vocab_size=n + 4,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=len(LAYER_TYPES),
        layer_types=LAYER_TYPES,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    vision = dict(
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=4,
        temporal_patch_size=2,
        spatial_merge_size=2,
        out_hidden_size=hidden,
        num_position_embeddings=16,
    )
    config = transformers.Qwen3_5Config(
        text_config=text,
        vision_config=vision,
        image_token_id=n,
        video_token_id=n + 1,
        vision_start_token_id=n + 2,
        vision_end_token_id=n + 3,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForConditionalGeneration(config).float()
    with torch.no_grad():  # HF initialises the zero-centred norms at 0: draw them, so a norm's
        # weight (Bridge's RMSNorm2ZeroCentered mapping, the final norm CLIPO hooks) is checked
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.normal_(0.0, 0.1)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _language_spec(provider, vp_stage=None, pp_rank=None):
    """Bridge's `_qwen35_build_language_block_spec` with CpuBackend for TESpecProvider."""
    from megatron.bridge.models.qwen_vl import qwen35_vl_provider as bridge_provider
    from megatron.core.models.gpt import experimental_attention_variant_module_specs as specs
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.transformer.transformer_block import (
        TransformerBlockSubmodules,
        get_num_layers_to_build,
        get_transformer_layer_offset,
    )

    backend = CpuBackend()
    # for this build: the TE-only backend choices (`_get_backend_spec_provider`'s assert; the
    # standard attention layer's `get_gpt_layer_with_transformer_engine_spec`: TESpecProvider())
    saved = (specs._get_backend_spec_provider, gpt_layer_specs.TESpecProvider)
    specs._get_backend_spec_provider = lambda config: backend
    gpt_layer_specs.TESpecProvider = CpuBackend
    try:
        layers = specs.get_transformer_layer_with_experimental_attention_variant_spec(
            provider, backend=backend
        )
    finally:
        specs._get_backend_spec_provider, gpt_layer_specs.TESpecProvider = saved
    offset = get_transformer_layer_offset(provider, vp_stage=vp_stage, pp_rank=pp_rank)
    count = get_num_layers_to_build(provider, vp_stage=vp_stage, pp_rank=pp_rank)
    block = TransformerBlockSubmodules(
        layer_specs=[cpu_spec(layers[i]) for i in range(offset, offset + count)],
        layer_norm=CpuNorm,
    )
    bridge_provider._patch_standard_attention_specs(block, bridge_provider.Qwen3VLSelfAttention)
    return block


@contextlib.contextmanager
def cpu_qwen35_patches() -> Iterator[None]:
    """While active: FLA's three kernels are `clipo_testkit.gdn_reference`'s in Megatron-Core's
    gated_delta_net namespace, and Bridge's Qwen3VLModel (which builds its vision encoder itself,
    `modelling_qwen3_vl/model.py`, from `get_vit_layer_with_transformer_engine_spec` and TE's
    norm / linears for the patch merger) gets the CPU modules for them."""
    from megatron.bridge.models.qwen_vl import qwen35_vl_provider as bridge_provider
    from megatron.bridge.models.qwen_vl.modelling_qwen3_vl import attention as vl_attention
    from megatron.bridge.models.qwen_vl.modelling_qwen3_vl import model as vl_model
    from megatron.core.tensor_parallel import RowParallelLinear

    from clipo_testkit.gdn_reference import bind_into_megatron

    vit_spec = vl_model.get_vit_layer_with_transformer_engine_spec
    swaps = {
        "get_vit_layer_with_transformer_engine_spec": lambda: cpu_spec(vit_spec()),
        "TENorm": CpuNorm,
        "TEColumnParallelLinear": column_parallel_linear(),
        "TERowParallelLinear": RowParallelLinear,
    }
    # Qwen3VLSelfAttention asks `isinstance(core_attention, TEDotProductAttention)` (attention.py,
    # `_qwen_attention_mask_for_core_attention`; without TE the name is a MagicMock): the CPU core
    # attention stands in for TE's there too
    targets = [(vl_model, name, value) for name, value in swaps.items()]
    targets.append((vl_attention, "TEDotProductAttention", core_attention()))
    # the provider's language block (`build_language_spec` calls it by this module-level name;
    # NeMo-RL rebuilds the provider from its run_config, so an instance attribute would not last)
    targets.append((bridge_provider, "_qwen35_build_language_block_spec", _language_spec))
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in targets]
    undo = bind_into_megatron()
    for mod, name, value in targets:
        setattr(mod, name, value)
    try:
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)
        undo()


def cpu_qwen35_provider(provider):
    """The provider's fused kernels off (`cpu_patches.CPU_PROVIDER_FIELDS`); build inside
    `cpu_qwen35_patches`."""
    from clipo_testkit.nemo_rl.real_worker.cpu_patches import CPU_PROVIDER_FIELDS

    for key, value in CPU_PROVIDER_FIELDS.items():
        if hasattr(provider, key):
            setattr(provider, key, value)
    return provider
