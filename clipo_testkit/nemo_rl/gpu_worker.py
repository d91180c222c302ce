# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The product's GPU Ray actor with the checks' reads (`inspection.InspectionMixin`): the GPU
contract hands NeMo-RL this class by its `worker_extension_cls_fqn`, with the stock Megatron
worker's venv registered for it (`worker_env.register_clipo_worker_env`), as a user would hand
their own subclass. Imported only inside that venv."""

from __future__ import annotations

import ray
from nemo_rl.models.policy.utils import get_runtime_env_for_policy_worker

from clipo_megatron.nemo_rl.worker_extension import ClipoMegatronPolicyWorkerImpl
from clipo_testkit.nemo_rl.inspection import InspectionMixin


@ray.remote(runtime_env=get_runtime_env_for_policy_worker("megatron_policy_worker"))
class InspectedClipoMegatronPolicyWorker(InspectionMixin, ClipoMegatronPolicyWorkerImpl):
    pass
