# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Policy set-up for the single-machine run: Megatron-Core GPTModel + HF generator copy.

The training policy is a Megatron-Core GPTModel (CPU layer spec); the
generator is an HF model of the same weights, re-synced after each update.
"""

from __future__ import annotations

from clipo_megatron.models.hf_convert import (
    arch_from_hf_config,
    hf_to_megatron,
    load_megatron_state,
)
from clipo_megatron.runner.model.model_builder import (
    build_gpt_model,
    policy_from_hf,
    transformer_config,
)


def build_policy(hf_model, tp: int = 1, pp: int = 1):
    """A GPTModel holding the HF model's weights (this rank's stage and TP shard of them), and its architecture."""
    if tp == 1 and pp == 1:
        return policy_from_hf(hf_model)
    arch = arch_from_hf_config(hf_model.config)
    from clipo_megatron.megatron import parallel as mp
    from clipo_megatron.runner.model.tp_state import check_divisible
    from clipo_megatron.runner.pipeline import layer_offset, local_from_full

    check_divisible(arch, tp)
    layer_offset(arch.num_layers)  # pp must divide the layers
    model = build_gpt_model(
        arch,
        transformer_config(arch, tensor_parallel=tp, pipeline_parallel=pp),
        pre_process=mp.is_pipeline_first_stage(),
        post_process=mp.is_pipeline_last_stage(),
    )
    load_megatron_state(
        model,
        local_from_full(model.state_dict(), hf_to_megatron(hf_model.state_dict(), arch), arch),
    )
    return model, arch
