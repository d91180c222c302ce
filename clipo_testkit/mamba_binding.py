# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Binds `clipo_testkit.mamba_reference`'s CPU kernels into Megatron-Core's `MambaMixer` module.

Kept apart from the references: they are pure torch and checked against Hugging Face; this is the
one place that knows which names `megatron.core.ssm.mamba_mixer` looks up at call time.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from clipo_testkit.mamba_reference import (
    RMSNormGated,
    causal_conv1d_fn,
    causal_conv1d_update,
    mamba_chunk_scan_combined,
    mamba_split_conv1d_scan_combined,
)


def bind_into(mixer_module: ModuleType) -> None:
    """Bind the references into `megatron.core.ssm.mamba_mixer` (CPU tests only).

    Without mamba_ssm, `ExtendedRMSNorm` was made at import time over a MagicMock (so it is a
    Mock, methods and all): it is rebuilt over `RMSNormGated` with Megatron-Core's
    `sharded_state_dict` (weight sharded along axis 0 over TP), calling the mixer module's own
    helpers. The mixer's packing check (installed-version probes of mamba_ssm / causal-conv1d) is
    answered yes.
    """
    mm = mixer_module

    class ExtendedRMSNorm(RMSNormGated):
        def sharded_state_dict(
            self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
        ) -> Any:
            if not hasattr(self, "tp_group"):
                self.tp_group = mm.parallel_state.get_tensor_model_parallel_group()
            state_dict = self.state_dict(prefix="", keep_vars=True)
            return mm.make_sharded_tensors_for_checkpoint(
                state_dict,
                prefix,
                {"weight": 0},
                sharded_offsets,
                tp_group=self.tp_group,
                dp_cp_group=(metadata or {})["dp_cp_group"],
            )

    for name, value in {
        "causal_conv1d_fn": causal_conv1d_fn,
        "causal_conv1d_update_cuda": causal_conv1d_update,
        "RMSNormGated": RMSNormGated,
        "ExtendedRMSNorm": ExtendedRMSNorm,
        "mamba_chunk_scan_combined": mamba_chunk_scan_combined,
        "mamba_split_conv1d_scan_combined": mamba_split_conv1d_scan_combined,
        "HAVE_MAMBA_SSM": True,
        "_check_mamba_sequence_packing_support": lambda for_inference_not_training=True: (
            True,
            None,
        ),
    }.items():
        setattr(mixer_module, name, value)
