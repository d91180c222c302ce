# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What a policy worker keeps between NeMo-RL's calls, in two typed objects.

`WorkerPassState` is the mixin's one attribute (`ClipoWorkerMixin._clipo`, set by `clipo_setup`):
the parallel groups and pooling rule every pass uses, the head (`ClipoWorkerState`, last
pipeline stage only) and, on the TransferQueue loop, the rows handed from one call to the next:
`clipo_expect_rows` announces the driver's row order (`announce`), `get_logprobs_presharded`
turns it into its shard's rows (`shard_rows`), and `get_logprobs` takes them (`take_shard_rows`).
Each hand-over is consumed once, so rows announced for the prev-logprob pass never reach the
reference pass or the next step's pass.

`ClipoWorkerState`: the head, its trainer and the rows pooled in the last logprob pass; its head
step returns (row ids, r_CL, metrics) and it saves / loads the full head.

No NeMo-RL import, so all of it runs in CPU tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from clipo_megatron.file_format import check_version, stamped
from clipo_megatron.megatron.clipo_step import clipo_step
from clipo_megatron.megatron.parallel import ParallelGroups
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig


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


@dataclass
class WorkerPassState:
    """One worker's CLIPO state between NeMo-RL's calls (`clipo_setup` builds it; None: CLIPO off,
    every pass is NeMo-RL's own)."""

    groups: ParallelGroups = field(default_factory=ParallelGroups)  # TP / CP / DP, SP flag
    pool_last_token: bool = True  # clipo.pool_last_token: pool y1..yT (False: y1..yT-1)
    head_state: ClipoWorkerState | None = None  # the last pipeline stage's head; None elsewhere
    announced: dict[str, int] | None = None  # TransferQueue: sample id -> the driver's row
    pending_rows: torch.Tensor | None = None  # the next get_logprobs' rows, in its data's order

    def announce(self, sample_ids: list[str]) -> None:
        """The driver's row order for the next logprob pass (TransferQueue: `meta.sample_ids`)."""
        self.announced = {sid: i for i, sid in enumerate(sample_ids)}

    def shard_rows(self, sample_ids: list[str]) -> torch.Tensor | None:
        """Consume the announcement: this shard's samples as the driver's rows, held for the
        `get_logprobs` inside this pass (None, and nothing held, when none was announced)."""
        row_of, self.announced = self.announced, None
        self.pending_rows = None
        if row_of is None:
            return None
        missing = [sid for sid in sample_ids if sid not in row_of]
        if missing:
            raise ValueError(
                f"the logprob shard holds sample ids {missing[:4]} the driver did not announce "
                "(clipo_expect_rows): the batch changed between the announcement and the pass"
            )
        self.pending_rows = torch.tensor([row_of[sid] for sid in sample_ids])
        return self.pending_rows

    def take_shard_rows(self) -> torch.Tensor | None:
        """The rows `shard_rows` held for this `get_logprobs` (once: None after)."""
        rows, self.pending_rows = self.pending_rows, None
        return rows
