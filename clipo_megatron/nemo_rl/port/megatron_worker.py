# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's Megatron policy worker as CLIPO's worker extension builds on it: the class, the
module whose `get_microbatch_iterator` its `get_logprobs` reads (`rebinding.microbatches_teed`
tees it), the Ray runtime env of its actor, and where it keeps the model's TransformerConfig.
Imported inside the worker's Python only (it needs Megatron-Bridge): `worker_extension.py`."""

from __future__ import annotations

from typing import Any

from nemo_rl.models.policy.utils import get_runtime_env_for_policy_worker
from nemo_rl.models.policy.workers import megatron_policy_worker as MICROBATCH_MODULE
from nemo_rl.models.policy.workers.megatron_policy_worker import MegatronPolicyWorkerImpl

__all__ = ["MICROBATCH_MODULE", "MegatronPolicyWorkerImpl", "model_config", "runtime_env"]


def runtime_env() -> dict[str, Any]:
    """The runtime env NeMo-RL gives its own Megatron policy worker actor."""
    return get_runtime_env_for_policy_worker("megatron_policy_worker")


def model_config(worker: Any) -> Any:
    """The worker's TransformerConfig (`self.megatron_cfg.model`, seam "worker attributes")."""
    return worker.megatron_cfg.model
