# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Worker-side CLIPO state: pooling inside the logprob pass, the head step, head checkpoints.

No NeMo-RL import here (the Ray worker class that mixes this in lives in
`worker_extension.py`), so all of it runs in CPU tests.

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

import os
from typing import Any

import torch

from clipo_megatron.file_format import check_version, stamped
from clipo_megatron.megatron.clipo_step import clipo_step
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

__all__ = [
    "SAMPLE_IDX_KEY",
    "ClipoWorkerMixin",
    "ClipoWorkerState",
    "FinalNormNotFound",
    "MicrobatchPooler",
    "find_final_norm",
    "packed_response_mask",
]


class ClipoWorkerState:
    """The head, its trainer and the rows pooled in the last logprob pass (last pipeline stage)."""

    def __init__(self, cfg: ClipoNemoRLConfig, head: torch.nn.Module, *, dp_group=None):
        from clipo_megatron.megatron.head_trainer import HeadTrainer

        self.cfg = cfg
        self.trainer = HeadTrainer(head, cfg.method, dp_group=dp_group)
        self.rows = torch.zeros(0, dtype=torch.long)
        self.pooled: torch.Tensor | None = None
        self.empty: torch.Tensor | None = None  # [b] bool: rows that pooled no token

    @property
    def head(self) -> torch.nn.Module:
        return self.trainer.head

    def record(
        self, rows: torch.Tensor, pooled: torch.Tensor, empty: torch.Tensor | None = None
    ) -> None:
        """This pass's pooled rows; `empty` [b]: rows with no token pooled (a failed
        generation's empty response), which the head step leaves out of the contrastive set."""
        if rows.numel() != pooled.shape[0]:
            raise ValueError(f"{rows.numel()} row ids for {pooled.shape[0]} pooled rows")
        if rows.unique().numel() != rows.numel():
            raise ValueError("a row was pooled twice in one logprob pass")
        if empty is not None and empty.numel() != rows.numel():
            raise ValueError(f"{empty.numel()} empty flags for {rows.numel()} pooled rows")
        self.rows, self.pooled, self.empty = rows, pooled, empty

    def head_step(
        self, correct: torch.Tensor, group_ids: torch.Tensor, step: int
    ) -> dict[str, Any]:
        """correct / group_ids: [B] for the whole batch (every worker gets all of it)."""
        if self.pooled is None:
            raise RuntimeError("head_step before any logprob pass captured hidden states")
        if self.rows.numel() and int(self.rows.max()) >= correct.numel():
            raise ValueError(
                f"pooled row ids reach {int(self.rows.max())} but the batch has {correct.numel()} rows"
            )
        rows = self.rows  # [b] on the pooled states' device (MicrobatchPooler.result)
        dev = rows.device
        out = clipo_step(
            self.trainer,
            self.pooled,
            correct.to(dev)[rows].float(),
            group_ids.to(dev)[rows].long(),
            rows,
            step=step,
            empty=self.empty,
        )
        self.pooled = None  # one head step per logprob pass
        # Ray carries host tensors back to the driver, which assembles them by row id.
        return {"sample_idx": rows.cpu(), "rewards": out.rewards.cpu(), "metrics": out.metrics}

    # ---- checkpoints: <step dir>/<head_checkpoint_dir>/head.pt, the full head (any TP / PP / CP / DP)

    @staticmethod
    def head_path(step_dir: str, cfg: ClipoNemoRLConfig) -> str:
        return os.path.join(step_dir, cfg.head_checkpoint_dir, HEAD_FILE)

    def save(
        self, step_dir: str, *, writer: bool = True, tp_group=None, extra: dict | None = None
    ) -> str:
        """Every TP rank of the head joins (the sharded tensors are gathered); `writer` saves."""
        from clipo_megatron.megatron.head_checkpoint import full_trainer_state

        state = full_trainer_state(self.trainer, tp_group)
        path = self.head_path(step_dir, self.cfg)
        if writer:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            payload = stamped(
                {"trainer": state, "extra": extra or {}, "config": self.cfg.method.to_dict()},
                HEAD_FORMAT,
            )
            torch.save(payload, path + ".tmp")
            os.replace(path + ".tmp", path)  # a reader never sees half a file
        return path

    def load(self, step_dir: str, *, tp_group=None) -> dict:
        from clipo_megatron.core.safe_load import load_state
        from clipo_megatron.megatron.head_checkpoint import load_full_trainer_state

        path = self.head_path(step_dir, self.cfg)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"no CLIPO head checkpoint at {path}: the run was saved without CLIPO, or "
                "clipo.head_checkpoint_dir changed; set clipo.enabled=false to resume without it"
            )
        saved = load_state(path)  # weights only: a head file on shared storage never runs code
        check_version(saved, HEAD_FORMAT, path, HEAD_FORMAT_FIX)
        load_full_trainer_state(self.trainer, saved["trainer"], tp_group)
        return saved.get("extra", {})


HEAD_FILE = "head.pt"
HEAD_FORMAT = 1  # {format_version, trainer: the full (TP 1) head trainer state, extra, config}
HEAD_FORMAT_FIX = (
    "resume from a checkpoint this version wrote, or set clipo.enabled=false to resume the "
    "policy without its head"
)


class ClipoWorkerMixin:
    """The CLIPO methods of the policy worker, over any worker whose `get_logprobs(data=...)` reads its
    microbatches from `_clipo_iterator_module.get_microbatch_iterator` and runs `self.model`.

    The concrete worker provides `_clipo_model_config()` (its TransformerConfig) and
    `_clipo_iterator_module`; `clipo_setup` sets `self._clipo` (ClipoWorkerState, None off the
    last stage) and `self._clipo_groups` (megatron.parallel.ParallelGroups).
    """

    _clipo: ClipoWorkerState | None = None
    _clipo_groups: Any = None
    _clipo_iterator_module: Any = None
    _clipo_pool_last_token: bool = True  # clipo.pool_last_token

    _clipo_row_of: dict[str, int] | None = None  # TransferQueue: sample id -> driver's row
    _clipo_shard_rows: torch.Tensor | None = None  # the next get_logprobs' rows (its data's order)

    def clipo_expect_rows(self, *, sample_ids: list[str]) -> None:
        """TransferQueue loop: the driver's row order for the next logprob pass (`meta.sample_ids`,
        the order its `compute_advantage` sees), before `get_logprobs_from_meta` shards it."""
        self._clipo_row_of = {sid: i for i, sid in enumerate(sample_ids)}

    def get_logprobs_presharded(self, meta, micro_batch_size=None, **kwargs):
        """NeMo-RL's TransferQueue entry point (it fetches this shard's rows in `meta.sample_ids`
        order and calls `self.get_logprobs(data=)`): the shard's rows, as the driver's row
        indices, ride into that call as `SAMPLE_IDX_KEY`, as the policy attaches them on the
        other loops. Only the pass announced by `clipo_expect_rows` (prev_logprobs) pools."""
        row_of, self._clipo_row_of = self._clipo_row_of, None
        if row_of is not None:
            missing = [sid for sid in meta.sample_ids if sid not in row_of]
            if missing:
                raise ValueError(
                    f"the logprob shard holds sample ids {missing[:4]} the driver did not announce "
                    "(clipo_expect_rows): the batch changed between the announcement and the pass"
                )
            self._clipo_shard_rows = torch.tensor([row_of[sid] for sid in meta.sample_ids])
        try:
            return super().get_logprobs_presharded(
                meta, micro_batch_size=micro_batch_size, **kwargs
            )
        finally:
            self._clipo_shard_rows = None

    def get_logprobs(self, *, data, micro_batch_size=None, **kwargs):
        rows, self._clipo_shard_rows = self._clipo_shard_rows, None
        if rows is not None and self._clipo_groups is not None:
            if rows.numel() != data.size:
                raise ValueError(f"{rows.numel()} announced rows for a shard of {data.size}")
            data[SAMPLE_IDX_KEY] = rows  # the worker's own fetched copy; packing metadata kept
        if self._clipo_groups is None or SAMPLE_IDX_KEY not in data:  # reference pass / CLIPO off
            return super().get_logprobs(data=data, micro_batch_size=micro_batch_size, **kwargs)
        g = self._clipo_groups
        pooler = MicrobatchPooler(
            tp_group=g.tp,
            cp_group=g.cp,
            sequence_parallel=g.sequence_parallel,
            pool_last_token=self._clipo_pool_last_token,
        )
        norm = require_final_norm(self.model) if self._clipo is not None else None
        with microbatches_teed(self._clipo_iterator_module, pooler), pooler.hooked(norm):
            out = super().get_logprobs(data=data, micro_batch_size=micro_batch_size, **kwargs)
        if self._clipo is not None:
            self._clipo.record(*pooler.result(), empty=pooler.empty_rows())
        return out

    def clipo_setup(self, *, clipo_cfg: dict[str, Any]) -> bool:
        """Build the head on the last pipeline stage (called once by the policy after init, before
        the first rollout). A last stage whose model has no final norm CLIPO can hook refuses
        here in one line naming the model class (`FinalNormNotFound`), not at the first step."""
        from clipo_megatron.megatron import parallel as mp
        from clipo_megatron.megatron.head import build_contrastive_head
        from clipo_megatron.megatron.parallel import ParallelGroups

        cfg = ClipoNemoRLConfig.from_dict(clipo_cfg)
        self._clipo_pool_last_token = cfg.pool_last_token
        mcfg = self._clipo_model_config()  # type: ignore[attr-defined]  # the concrete worker's
        self._clipo_groups = ParallelGroups.from_parallel_state(
            sequence_parallel=bool(mcfg.sequence_parallel)
        )
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
                tp_group=self._clipo_groups.tp,
            )
        head = head.to(torch.cuda.current_device() if torch.cuda.is_available() else "cpu")
        self._clipo = ClipoWorkerState(cfg, head, dp_group=self._clipo_groups.dp)
        return True

    def clipo_save_head(self, *, step_dir: str, extra: dict | None = None) -> None:
        """Every worker joins; the last stage's TP ranks gather the head, its rank with TP, DP and
        CP rank 0 writes the one full file (loadable at any layout)."""
        from clipo_megatron.megatron import parallel as mp

        if self._clipo is not None:
            writer = (
                mp.data_parallel_rank() == 0
                and mp.context_parallel_rank() == 0
                and mp.tensor_parallel_rank() == 0
            )
            self._clipo.save(step_dir, writer=writer, tp_group=self._clipo_groups.tp, extra=extra)
        torch.distributed.barrier()

    def clipo_load_head(self, *, step_dir: str) -> dict:
        if self._clipo is None:
            return {}
        return self._clipo.load(step_dir, tp_group=self._clipo_groups.tp)

    def clipo_head_step(
        self, *, correct: torch.Tensor, group_ids: torch.Tensor, step: int
    ) -> dict[str, Any]:
        if self._clipo is None:  # not the last pipeline stage: nothing pooled here
            return {
                "sample_idx": torch.zeros(0, dtype=torch.long),
                "rewards": torch.zeros(0),
                "metrics": {},
            }
        return self._clipo.head_step(correct, group_ids, step)
