# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The Megatron policy worker extension (a Ray actor; imported only inside NeMo-RL's mcore venv).

Registered as NeMo-RL's `worker_extension_cls_fqn` (see `policy.py`):

    clipo_megatron.nemo_rl.worker_extension.ClipoMegatronPolicyWorker

Adds to `MegatronPolicyWorkerImpl` (NeMo-RL @ 7ea279a):
- `get_logprobs`: unchanged logprobs; when the data carries `clipo_sample_idx`
  (the CLIPO policy attaches it for the policy pass, not the reference pass)
  the same forward also pools response hidden states (no second forward);
- `clipo_head_step(correct, group_ids, step)`: the head step on those rows;
- `clipo_save_head(step_dir)` / `clipo_load_head(step_dir)`.

How the pooling rides the stock forward (`worker.ClipoWorkerMixin`): NeMo-RL's
`get_logprobs` reads its microbatches from `get_microbatch_iterator`, a name
in the worker module's namespace; for the duration of one call it is wrapped
so every processed microbatch passes through `MicrobatchPooler.tee`, and the
final norm of the last stage is hooked. Nothing of NeMo-RL is edited; the
name is restored on exit, and a missing name (a NeMo-RL that moved it)
raises naming the commit we target.
"""

from __future__ import annotations

from typing import Any

import ray
import torch
from nemo_rl.models.policy.utils import get_runtime_env_for_policy_worker
from nemo_rl.models.policy.workers import megatron_policy_worker as _mpw
from nemo_rl.models.policy.workers.megatron_policy_worker import MegatronPolicyWorkerImpl

from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.worker import ClipoWorkerMixin, ClipoWorkerState


class ClipoMegatronPolicyWorkerImpl(ClipoWorkerMixin, MegatronPolicyWorkerImpl):
    """MegatronPolicyWorkerImpl + CLIPO (capture in the logprob pass, head step, head checkpoints)."""

    _clipo_iterator_module = _mpw

    def clipo_setup(self, clipo_cfg: dict[str, Any]) -> bool:
        """Build the head on the last pipeline stage (called once by the policy after init)."""
        from megatron.core import parallel_state as ps

        from clipo_megatron.megatron.head import build_contrastive_head
        from clipo_megatron.megatron.parallel import ParallelGroups

        cfg = ClipoNemoRLConfig.from_dict(clipo_cfg)
        self._clipo_cfg = cfg
        mcfg = self.megatron_cfg.model
        self._clipo_groups = ParallelGroups.from_parallel_state(
            sequence_parallel=bool(mcfg.sequence_parallel)
        )
        if not ps.is_pipeline_last_stage(ignore_virtual=True):
            return False
        head_cfg = _fp32_config(mcfg)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.method.seed)  # identical replicated head on every DP / TP rank
            head = build_contrastive_head(
                head_cfg,
                input_size=mcfg.hidden_size,
                embed_dim=cfg.method.embed_dim,
                head_type=cfg.method.head_type,
                tensor_parallel=cfg.head_tensor_parallel,
                tp_group=self._clipo_groups.tp,
            )
        head = head.to(torch.cuda.current_device() if torch.cuda.is_available() else "cpu")
        self._clipo = ClipoWorkerState(cfg, head, dp_group=self._clipo_groups.dp)
        return True

    def clipo_save_head(self, step_dir: str, extra: dict | None = None) -> None:
        from megatron.core import parallel_state as ps

        if self._clipo is not None:
            writer = ps.get_data_parallel_rank() == 0 and ps.get_context_parallel_rank() == 0
            self._clipo.save(
                step_dir, tp_rank=ps.get_tensor_model_parallel_rank(), writer=writer, extra=extra
            )
        torch.distributed.barrier()

    def clipo_load_head(self, step_dir: str) -> dict:
        from megatron.core import parallel_state as ps

        if self._clipo is None:
            return {}
        return self._clipo.load(step_dir, tp_rank=ps.get_tensor_model_parallel_rank())


def _fp32_config(model_cfg):
    """A copy of the model's TransformerConfig with fp32 params (the head trains in fp32)."""
    import copy

    cfg = copy.copy(model_cfg)
    cfg.params_dtype = torch.float32
    cfg.bf16 = False
    cfg.fp16 = False
    return cfg


@ray.remote(
    runtime_env=get_runtime_env_for_policy_worker("megatron_policy_worker")
)  # pragma: no cover
class ClipoMegatronPolicyWorker(ClipoMegatronPolicyWorkerImpl):
    pass
