# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The Megatron policy worker extension (a Ray actor; imported only inside NeMo-RL's mcore venv).

Registered as NeMo-RL's `worker_extension_cls_fqn` (see `policy.py`):

    clipo_megatron.nemo_rl.worker_extension.ClipoMegatronPolicyWorker

= `worker.ClipoWorkerMixin` over NeMo-RL's `MegatronPolicyWorkerImpl`. The
contract suite (tests/nemo_rl/, `scripts/test_nemo_rl.sh`) builds this very class on CPU
through NeMo-RL's own `__init__` (CUDA / NCCL calls patched from test code) and runs it
inside NeMo-RL's real `grpo_train`.

How the pooling rides the stock forward: NeMo-RL's `get_logprobs` reads its
microbatches from `get_microbatch_iterator`, a name in the worker module's
namespace (`_clipo_iterator_module`); for the duration of one call it is
wrapped so every processed microbatch passes through the pooler's tee, and
the last stage's final norm is hooked. Nothing of NeMo-RL is edited.
"""

from __future__ import annotations

import ray
from nemo_rl.models.policy.utils import get_runtime_env_for_policy_worker
from nemo_rl.models.policy.workers import megatron_policy_worker as _mpw
from nemo_rl.models.policy.workers.megatron_policy_worker import MegatronPolicyWorkerImpl

from clipo_megatron.nemo_rl.worker import ClipoWorkerMixin


class ClipoMegatronPolicyWorkerImpl(ClipoWorkerMixin, MegatronPolicyWorkerImpl):
    """MegatronPolicyWorkerImpl + CLIPO (capture in the logprob pass, head step, head checkpoints)."""

    _clipo_iterator_module = _mpw

    def _clipo_model_config(self):
        return self.megatron_cfg.model


@ray.remote(
    runtime_env=get_runtime_env_for_policy_worker("megatron_policy_worker")
)  # pragma: no cover
class ClipoMegatronPolicyWorker(ClipoMegatronPolicyWorkerImpl):
    pass
