# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The policy worker's CLIPO methods: pooling inside the logprob pass, the head step, head checkpoints.

No NeMo-RL import here (the Ray worker class that mixes this in lives in
`worker_extension.py`), so all of it runs in CPU tests. What a worker keeps between NeMo-RL's
calls is one typed object, `worker_state.WorkerPassState` (`ClipoWorkerMixin._clipo`).

Logprob pass: the worker's own `get_logprobs` runs unchanged; the mixin tees
its microbatch iterator and hooks the final norm with
`megatron.pooling.microbatch_pooler.MicrobatchPooler` (the runner's logprob pass uses
the same pooler), so the response hidden states are pooled in that forward.

Head step (advantage time): `ClipoWorkerState.head_step(correct[B], group_ids[B], step)`
looks up this rank's rows, runs `megatron.head_trainer.HeadTrainer.step`
(DP all-gather of embeddings, loss on complete groups, rewards from the
pre-update loss, one AdamW step) and returns (row ids, r_CL, metrics).

The head is never registered in the policy model: it does not appear in the
model's state dict, so NeMo-RL's HF export and vLLM refit never see it.
"""

from __future__ import annotations

from typing import Any

import torch

from clipo_megatron.megatron.pooling.microbatch_pooler import (  # re-exported: the worker's vocabulary
    SAMPLE_IDX_KEY,
    FinalNormNotFound,
    MicrobatchPooler,
    find_final_norm,
    packed_response_mask,
    require_final_norm,
)
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.port.rebinding import microbatches_teed
from clipo_megatron.nemo_rl.worker_state import (  # re-exported: the head's state and files
    HEAD_FILE,
    HEAD_FORMAT,
    ClipoWorkerState,
    WorkerPassState,
)

__all__ = [
    "HEAD_FILE",
    "HEAD_FORMAT",
    "SAMPLE_IDX_KEY",
    "ClipoWorkerMixin",
    "ClipoWorkerState",
    "FinalNormNotFound",
    "MicrobatchPooler",
    "WorkerPassState",
    "find_final_norm",
    "packed_response_mask",
]


class ClipoWorkerMixin:
    """The CLIPO methods of the policy worker, over any worker whose `get_logprobs(data=...)` reads its
    microbatches from `_clipo_iterator_module.get_microbatch_iterator` and runs `self.model`.

    The concrete worker class provides `_clipo_model_config()` (its TransformerConfig) and
    `_clipo_iterator_module` (the module whose iterator the pass is teed at). Between calls the
    mixin keeps one attribute, `_clipo` (`WorkerPassState`, set by `clipo_setup`; None with CLIPO
    off, and then every method here is NeMo-RL's own pass or a no-op).
    """

    _clipo: WorkerPassState | None = None
    _clipo_iterator_module: Any = None

    def clipo_expect_rows(self, *, sample_ids: list[str]) -> None:
        """TransferQueue loop: the driver's row order for the next logprob pass (`meta.sample_ids`,
        the order its `compute_advantage` sees), before `get_logprobs_from_meta` shards it."""
        if self._clipo is None:
            raise RuntimeError("clipo_expect_rows before clipo_setup: CLIPO is off on this worker")
        self._clipo.announce(sample_ids)

    def get_logprobs_presharded(self, meta, micro_batch_size=None, **kwargs):
        """NeMo-RL's TransferQueue entry point (it fetches this shard's rows in `meta.sample_ids`
        order and calls `self.get_logprobs(data=)`): the shard's rows, as the driver's row
        indices, ride into that call as `SAMPLE_IDX_KEY`, as the policy attaches them on the
        other loops. Only the pass announced by `clipo_expect_rows` (prev_logprobs) pools."""
        st = self._clipo
        if st is None:
            return super().get_logprobs_presharded(
                meta, micro_batch_size=micro_batch_size, **kwargs
            )
        st.shard_rows(meta.sample_ids)  # held for the get_logprobs(data=) inside this pass
        try:
            out = super().get_logprobs_presharded(meta, micro_batch_size=micro_batch_size, **kwargs)
        finally:
            left = st.take_shard_rows()  # a failed pass hands nothing to the next one
        if left is not None:
            raise RuntimeError(
                "the announced rows of a logprob shard never reached get_logprobs(data=): NeMo-RL's "
                "get_logprobs_presharded no longer calls it, so nothing was pooled"
            )
        return out

    def get_logprobs(self, *, data, micro_batch_size=None, **kwargs):
        st = self._clipo
        rows = st.take_shard_rows() if st is not None else None
        if rows is not None:
            if rows.numel() != data.size:
                raise ValueError(f"{rows.numel()} announced rows for a shard of {data.size}")
            data[SAMPLE_IDX_KEY] = rows  # the worker's own fetched copy; packing metadata kept
        if st is None or SAMPLE_IDX_KEY not in data:  # reference pass / CLIPO off
            return super().get_logprobs(data=data, micro_batch_size=micro_batch_size, **kwargs)
        g = st.groups
        pooler = MicrobatchPooler(
            tp_group=g.tp,
            cp_group=g.cp,
            sequence_parallel=g.sequence_parallel,
            pool_last_token=st.pool_last_token,
        )
        norm = require_final_norm(self.model) if st.head_state is not None else None
        with microbatches_teed(self._clipo_iterator_module, pooler), pooler.hooked(norm):
            out = super().get_logprobs(data=data, micro_batch_size=micro_batch_size, **kwargs)
        if st.head_state is not None:
            st.head_state.record(*pooler.result(), empty=pooler.empty_rows())
        return out

    def clipo_setup(self, *, clipo_cfg: dict[str, Any]) -> bool:
        """Build the head on the last pipeline stage (called once by the policy after init, before
        the first rollout). A last stage whose model has no final norm CLIPO can hook refuses
        here in one line naming the model class (`FinalNormNotFound`), not at the first step."""
        from clipo_megatron.megatron import parallel as mp
        from clipo_megatron.megatron.head import build_contrastive_head
        from clipo_megatron.megatron.parallel import ParallelGroups

        cfg = ClipoNemoRLConfig.from_dict(clipo_cfg)
        mcfg = self._clipo_model_config()  # type: ignore[attr-defined]  # the concrete worker's
        groups = ParallelGroups.from_parallel_state(sequence_parallel=bool(mcfg.sequence_parallel))
        self._clipo = WorkerPassState(groups=groups, pool_last_token=cfg.pool_last_token)
        if not mp.is_pipeline_last_stage():
            return False
        require_final_norm(self.model)  # type: ignore[attr-defined]  # the concrete worker's
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.method.seed)  # identical replicated head on every DP / TP rank
            head = build_contrastive_head(
                mcfg,
                input_size=mcfg.hidden_size,
                embed_dim=cfg.method.embed_dim,
                head_type=cfg.method.head_type,
                tensor_parallel=cfg.head_tensor_parallel,
                tp_group=groups.tp,
            )
        head = head.to(torch.cuda.current_device() if torch.cuda.is_available() else "cpu")
        self._clipo.head_state = ClipoWorkerState(cfg, head, dp_group=groups.dp)
        return True

    def clipo_save_head(self, *, step_dir: str, extra: dict | None = None) -> None:
        """Every worker joins; the last stage's TP ranks gather the head, its rank with TP, DP and
        CP rank 0 writes the one full file (loadable at any layout)."""
        from clipo_megatron.megatron import parallel as mp

        st = self._clipo
        if st is not None and st.head_state is not None:
            writer = (
                mp.data_parallel_rank() == 0
                and mp.context_parallel_rank() == 0
                and mp.tensor_parallel_rank() == 0
            )
            st.head_state.save(step_dir, writer=writer, tp_group=st.groups.tp, extra=extra)
        torch.distributed.barrier()

    def clipo_load_head(self, *, step_dir: str) -> dict:
        st = self._clipo
        if st is None or st.head_state is None:
            return {}
        return st.head_state.load(step_dir, tp_group=st.groups.tp)

    def clipo_head_step(
        self, *, correct: torch.Tensor, group_ids: torch.Tensor, step: int
    ) -> dict[str, Any]:
        """Called on every worker by the driver's `head_step.WorkersHeadStep`; the last stage trains
        the head on the rows its prev-logprob pass pooled and returns their r_CL."""
        st = self._clipo
        if st is None or st.head_state is None:  # not the last pipeline stage: nothing pooled here
            return {
                "sample_idx": torch.zeros(0, dtype=torch.long),
                "rewards": torch.zeros(0),
                "metrics": {},
            }
        return st.head_state.head_step(correct, group_ids, step)


# The methods the driver calls on every worker through Ray, by name (NeMo-RL's
# `run_all_workers_single_data(method, ...)`): spelled from the methods themselves, so a rename
# fails when this module is imported, not inside a Ray actor.
CLIPO_SETUP = ClipoWorkerMixin.clipo_setup.__name__
CLIPO_EXPECT_ROWS = ClipoWorkerMixin.clipo_expect_rows.__name__
CLIPO_HEAD_STEP = ClipoWorkerMixin.clipo_head_step.__name__
CLIPO_SAVE_HEAD = ClipoWorkerMixin.clipo_save_head.__name__
CLIPO_LOAD_HEAD = ClipoWorkerMixin.clipo_load_head.__name__
