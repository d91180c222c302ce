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

from clipo_megatron.nemo_rl.port import megatron_worker
from clipo_megatron.nemo_rl.port.megatron_worker import MegatronPolicyWorkerImpl
from clipo_megatron.nemo_rl.worker import ClipoWorkerMixin


class ClipoMegatronPolicyWorkerImpl(ClipoWorkerMixin, MegatronPolicyWorkerImpl):
    """MegatronPolicyWorkerImpl + CLIPO (capture in the logprob pass, head step, head checkpoints)."""

    _clipo_iterator_module = megatron_worker.MICROBATCH_MODULE

    def _clipo_model_config(self):
        return megatron_worker.model_config(self)


@ray.remote(runtime_env=megatron_worker.runtime_env())  # pragma: no cover
class ClipoMegatronPolicyWorker(ClipoMegatronPolicyWorkerImpl):
    pass
