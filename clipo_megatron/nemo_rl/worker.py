# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Worker-side CLIPO state: pooling inside the logprob pass, the head step, head checkpoints.

No NeMo-RL import here (the Ray worker class that mixes this in lives in
`worker_extension.py`), so all of it runs in CPU tests.

Logprob pass (NeMo-RL `MegatronPolicyWorker.get_logprobs`): the worker
consumes processed microbatches (`ProcessedMicrobatch`: the microbatch's
`data_dict`, `cu_seqlens_padded` when packed) and runs the forward through
Megatron's schedule. `MicrobatchPooler` tees that iterator, remembering each
microbatch's rows (`clipo_sample_idx`), response mask and packing layout, and
a forward hook on the final norm (last pipeline stage) pools the hidden
states of the microbatch being run:

    padded: hidden [S(/TP with SP), b, H]   packed: hidden [T(/CP)(/TP with SP), 1, H]

into per-row fp32 means [b, H] with `megatron.parallel_pooling` (partial sums
all-reduced over TP-with-SP and CP; D floats per row). Forward-only
schedules run microbatches in iterator order, so the k-th hook call is the
k-th microbatch.

Head step (advantage time): `ClipoWorkerState.head_step(correct[B], group_ids[B], step)`
looks up this rank's rows, runs `megatron.head_trainer.HeadTrainer.step`
(DP all-gather of embeddings, loss on complete groups, rewards from the
pre-update loss, one AdamW step) and returns (row ids, r_CL, metrics).

The head is never registered in the policy model: it does not appear in the
model's state dict, so NeMo-RL's HF export and vLLM refit never see it.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig

SAMPLE_IDX_KEY = "clipo_sample_idx"


def _get(mb: Any, key: str):
    if isinstance(mb, dict):
        return mb.get(key)
    return getattr(mb, key, None)


def packed_response_mask(
    token_mask: torch.Tensor,
    input_lengths: torch.Tensor,
    cu_seqlens_padded: torch.Tensor,
    total_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lay per-row response masks [b, S] into the packed stream; returns (stream mask [T], cu [b+1 or b+2]).

    Row i occupies [cu[i], cu[i] + len_i) (NeMo-RL packs right-padded rows
    in order and pads each to cu[i+1] - cu[i]). `total_len` > cu[-1] (PP's
    pad-to-full length) adds one trailing all-padding segment.
    """
    cu = cu_seqlens_padded.long().cpu()
    b = token_mask.shape[0]
    if cu.numel() != b + 1:
        raise ValueError(
            f"cu_seqlens_padded has {cu.numel()} entries for {b} rows (expected b + 1)"
        )
    stream = torch.zeros(int(cu[-1]), dtype=torch.bool)
    tm = token_mask.bool().cpu()
    for i in range(b):
        n = int(input_lengths[i])
        if n > int(cu[i + 1] - cu[i]):
            raise ValueError(
                f"row {i}: length {n} exceeds its packed slot {int(cu[i + 1] - cu[i])}"
            )
        stream[int(cu[i]) : int(cu[i]) + n] = tm[i, :n]
    if total_len is not None and total_len > int(cu[-1]):
        stream = torch.cat([stream, torch.zeros(total_len - int(cu[-1]), dtype=torch.bool)])
        cu = torch.cat([cu, torch.tensor([total_len])])
    return stream, cu


class MicrobatchPooler:
    """Tee of the microbatch iterator + final-norm hook -> per-row pooled means."""

    def __init__(
        self,
        *,
        tp_group=None,
        cp_group=None,
        sequence_parallel: bool = False,
        response_key: str = "token_mask",
    ):
        self.tp_group = tp_group
        self.cp_group = cp_group
        self.sequence_parallel = sequence_parallel
        self.response_key = response_key
        self.pending: deque = deque()
        self.rows: list[torch.Tensor] = []
        self.pooled: list[torch.Tensor] = []

    def tee(self, iterator: Iterable) -> Iterator:
        for mb in iterator:
            data = _get(mb, "data_dict")
            data = mb if data is None else data
            if SAMPLE_IDX_KEY not in data:
                raise ValueError(
                    f"microbatch has no {SAMPLE_IDX_KEY!r}: the CLIPO policy attaches it to the "
                    "logprob data; was get_logprobs called through ClipoPolicy?"
                )
            self.pending.append(
                {
                    "rows": torch.as_tensor(data[SAMPLE_IDX_KEY]).long().cpu(),
                    "mask": torch.as_tensor(data[self.response_key]),
                    "lengths": torch.as_tensor(data["input_lengths"])
                    if "input_lengths" in data
                    else None,
                    "cu": _get(mb, "cu_seqlens_padded"),
                }
            )
            yield mb

    def pool(self, hidden: torch.Tensor) -> None:
        """Pool one microbatch's final hidden states (called from the final-norm hook)."""
        from clipo_megatron.megatron.parallel_pooling import (
            local_rank_info,
            packed_local_segment_ids,
            padded_local_segment_ids,
            sharded_response_mean,
        )

        if not self.pending:
            raise RuntimeError(
                "final-norm hook fired with no pending microbatch (iterator/forward out of step)"
            )
        meta = self.pending.popleft()
        info = local_rank_info(self.tp_group, self.cp_group, self.sequence_parallel)
        shard = info["cp_size"] * info["sp_size"]
        mask = meta["mask"].bool().cpu()  # [b, S]
        b = mask.shape[0]
        if meta["cu"] is not None:  # packed THD: hidden [T_local, 1, H]
            total = hidden.shape[0] * shard
            stream, cu = packed_response_mask(mask, meta["lengths"], meta["cu"], total)
            seg = packed_local_segment_ids(cu, stream, **info)  # [T_local], trailing pad -> -1
            seg = torch.where(seg >= b, torch.full_like(seg, -1), seg)
            counts = torch.stack(
                [stream[int(cu[i]) : int(cu[i + 1])].sum() for i in range(b)]
            )  # [b]
        else:  # padded sbd: hidden [S_local, b, H]
            s_full = hidden.shape[0] * shard
            if mask.shape[1] > s_full:
                raise ValueError(
                    f"response mask has {mask.shape[1]} positions, hidden states cover {s_full}"
                )
            mask = torch.nn.functional.pad(mask, (0, s_full - mask.shape[1]))  # [b, S_full]
            seg = padded_local_segment_ids(mask, **info)  # [S_local * b]
            counts = mask.sum(1)  # [b]
        pooled = sharded_response_mean(
            hidden.detach().float(),
            seg.to(hidden.device),
            counts.to(hidden.device),
            tp_group=self.tp_group,
            cp_group=self.cp_group,
            sequence_parallel=self.sequence_parallel,
        )  # [b, H]
        self.rows.append(meta["rows"])
        self.pooled.append(pooled)

    @contextlib.contextmanager
    def hooked(self, final_norm: torch.nn.Module | None):
        """Hook `final_norm` (None on non-last pipeline stages: nothing to pool there)."""
        if final_norm is None:
            yield self
            return
        handle = final_norm.register_forward_hook(
            lambda _m, _i, out: self.pool(out[0] if isinstance(out, tuple) else out)
        )
        try:
            yield self
        finally:
            handle.remove()

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pending:
            raise RuntimeError(
                f"{len(self.pending)} microbatches were read but never reached the final norm"
            )
        if not self.rows:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, 0)
        return torch.cat(self.rows), torch.cat(self.pooled)


def find_final_norm(model: Any) -> torch.nn.Module | None:
    """`decoder.final_layernorm` of the (last) model chunk, unwrapping DDP / Float16Module; None if absent."""
    chunks = model if isinstance(model, list | tuple) else [model]
    for chunk in reversed(chunks):
        m = chunk
        for _ in range(4):
            if hasattr(m, "decoder"):
                break
            m = getattr(m, "module", m)
        norm = getattr(getattr(m, "decoder", None), "final_layernorm", None)
        if norm is not None and getattr(m, "post_process", True):
            return norm
    return None


class ClipoWorkerState:
    """The head, its trainer and the rows pooled in the last logprob pass (last pipeline stage)."""

    def __init__(self, cfg: ClipoNemoRLConfig, head: torch.nn.Module, *, dp_group=None):
        from clipo_megatron.megatron.head_trainer import HeadTrainer

        self.cfg = cfg
        self.trainer = HeadTrainer(head, cfg.method, dp_group=dp_group)
        self.rows = torch.zeros(0, dtype=torch.long)
        self.pooled: torch.Tensor | None = None

    @property
    def head(self) -> torch.nn.Module:
        return self.trainer.head

    def record(self, rows: torch.Tensor, pooled: torch.Tensor) -> None:
        if rows.numel() != pooled.shape[0]:
            raise ValueError(f"{rows.numel()} row ids for {pooled.shape[0]} pooled rows")
        if rows.unique().numel() != rows.numel():
            raise ValueError("a row was pooled twice in one logprob pass")
        self.rows, self.pooled = rows, pooled

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
        rows = self.rows
        out = self.trainer.step(
            self.pooled, correct[rows].float(), group_ids[rows].long(), rows, step=step
        )
        self.pooled = None  # one head step per logprob pass
        return {"sample_idx": rows, "rewards": out.rewards.float().cpu(), "metrics": out.metrics}

    # ---- checkpoints: <step dir>/<head_checkpoint_dir>/head_tp{r}.pt, written by dp_rank 0 / cp_rank 0

    @staticmethod
    def head_path(step_dir: str, cfg: ClipoNemoRLConfig, tp_rank: int) -> str:
        return os.path.join(step_dir, cfg.head_checkpoint_dir, f"head_tp{tp_rank}.pt")

    def save(
        self, step_dir: str, *, tp_rank: int = 0, writer: bool = True, extra: dict | None = None
    ) -> str:
        path = self.head_path(step_dir, self.cfg, tp_rank)
        if writer:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            torch.save(
                {
                    "trainer": self.trainer.state_dict(),
                    "extra": extra or {},
                    "config": self.cfg.method.to_dict(),
                },
                path,
            )
        return path

    def load(self, step_dir: str, *, tp_rank: int = 0) -> dict:
        path = self.head_path(step_dir, self.cfg, tp_rank)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"no CLIPO head checkpoint at {path}: the run was saved without CLIPO, or "
                "clipo.head_checkpoint_dir changed; set clipo.enabled=false to resume without it"
            )
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.trainer.load_state_dict(state["trainer"])
        return state.get("extra", {})


@contextlib.contextmanager
def teed_microbatches(
    module: Any, pooler: MicrobatchPooler, *, name: str = "get_microbatch_iterator"
):
    """Rebind `module.<name>` (a function returning (iterator, *meta)) so its iterator goes through `pooler.tee`."""
    original = getattr(module, name, None)
    if original is None:
        raise RuntimeError(
            f"{getattr(module, '__name__', module)}.{name} not found; this integration targets "
            "NeMo-RL 7ea279a (docs/nemo_rl.md)"
        )

    def wrapped(*args, **kwargs):
        it, *rest = original(*args, **kwargs)
        return (pooler.tee(it), *rest)

    setattr(module, name, wrapped)
    try:
        yield
    finally:
        setattr(module, name, original)


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

    def get_logprobs(self, *, data, micro_batch_size=None, **kwargs):
        if self._clipo_groups is None or SAMPLE_IDX_KEY not in data:  # reference pass / CLIPO off
            return super().get_logprobs(data=data, micro_batch_size=micro_batch_size, **kwargs)  # type: ignore[misc]
        g = self._clipo_groups
        pooler = MicrobatchPooler(
            tp_group=g.tp, cp_group=g.cp, sequence_parallel=g.sequence_parallel
        )
        norm = find_final_norm(self.model) if self._clipo is not None else None  # type: ignore[attr-defined]
        with teed_microbatches(self._clipo_iterator_module, pooler), pooler.hooked(norm):
            out = super().get_logprobs(data=data, micro_batch_size=micro_batch_size, **kwargs)  # type: ignore[misc]
        if self._clipo is not None:
            self._clipo.record(*pooler.result())
        return out

    def clipo_setup(self, *, clipo_cfg: dict[str, Any]) -> bool:
        """Build the head on the last pipeline stage (called once by the policy after init)."""
        from megatron.core import parallel_state as ps

        from clipo_megatron.megatron.head import build_contrastive_head
        from clipo_megatron.megatron.parallel import ParallelGroups

        cfg = ClipoNemoRLConfig.from_dict(clipo_cfg)
        mcfg = self._clipo_model_config()  # type: ignore[attr-defined]  # the concrete worker's
        self._clipo_groups = ParallelGroups.from_parallel_state(
            sequence_parallel=bool(mcfg.sequence_parallel)
        )
        if not ps.is_pipeline_last_stage(ignore_virtual=True):
            return False
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.method.seed)  # identical replicated head on every DP / TP rank
            head = build_contrastive_head(
                _fp32_config(mcfg),
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
        """Every worker joins; dp_rank 0 / cp_rank 0 of each TP rank on the last stage writes."""
        from megatron.core import parallel_state as ps

        if self._clipo is not None:
            writer = ps.get_data_parallel_rank() == 0 and ps.get_context_parallel_rank() == 0
            self._clipo.save(
                step_dir, tp_rank=ps.get_tensor_model_parallel_rank(), writer=writer, extra=extra
            )
        torch.distributed.barrier()

    def clipo_load_head(self, *, step_dir: str) -> dict:
        from megatron.core import parallel_state as ps

        if self._clipo is None:
            return {}
        return self._clipo.load(step_dir, tp_rank=ps.get_tensor_model_parallel_rank())

    def clipo_head_state(self) -> dict:
        """The head trainer's state (head, AdamW, RNG, steps); {} off the last stage. For checks."""
        return {} if self._clipo is None else self._clipo.trainer.state_dict()

    def clipo_head_step(
        self, *, correct: torch.Tensor, group_ids: torch.Tensor, step: int
    ) -> dict[str, Any]:
        if self._clipo is None:  # not the last pipeline stage: nothing pooled here
            return {
                "sample_idx": torch.zeros(0, dtype=torch.long),
                "rewards": torch.zeros(0),
                "metrics": {},
            }
        dev = self._clipo.pooled.device if self._clipo.pooled is not None else torch.device("cpu")
        return self._clipo.head_step(correct.to(dev), group_ids.to(dev), step)


def _fp32_config(model_cfg):
    """A copy of the model's TransformerConfig with fp32 params (the head trains in fp32)."""
    import copy

    cfg = copy.copy(model_cfg)
    cfg.params_dtype = torch.float32
    cfg.bf16 = False
    cfg.fp16 = False
    return cfg
