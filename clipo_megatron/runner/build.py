# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The models a `Run` holds, built from its config: the policy (this rank's stage and TP shard),
the frozen reference for a KL term, the rollout generator (rank 0), the optimiser and the CLIPO
head.

Apart from `runner/run.py` (the RL step and the checkpoint state) because the building order is
a contract of its own: every rank builds the same things in the same order and so draws the same
random numbers (the head is built on every rank, after `torch.manual_seed(seed + 1)`), which is
what makes a resumed or model-parallel run start from the weights a single process would. The
heavy imports stay inside `build_models`, so importing the runner loads no model code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from clipo_megatron.runner import parallel
from clipo_megatron.runner.config import RunConfig
from clipo_megatron.runner.layout import Layout

if TYPE_CHECKING:
    from clipo_megatron.megatron.head_trainer import HeadTrainer


def max_model_len(cfg: RunConfig) -> int:
    """Prompt budget + the longest generation the run asks for (train or eval), for the vLLM engine."""
    return 1024 + max(cfg.rollout.max_tokens, cfg.eval.max_tokens)


class RunModels(NamedTuple):
    """What `build_models` returns, in the order `Run` holds it."""

    tok: Any
    model: Any
    arch: Any
    ref_model: Any  # None without a KL term
    gen: Any  # None off rank 0
    optimizer: torch.optim.Optimizer
    head: HeadTrainer | None  # None off the last stage and in the baseline


def build_models(cfg: RunConfig, layout: Layout, *, reference: bool) -> RunModels:
    """Every model of the run for `layout`; `reference`: also the KL term's frozen reference."""
    from clipo_megatron.generation.factory import build_rollout_generator
    from clipo_megatron.megatron.head import attach_head, build_contrastive_head
    from clipo_megatron.megatron.head_trainer import HeadTrainer
    from clipo_megatron.models.hf_policy import load_hf_policy
    from clipo_megatron.runner.model.model_builder import transformer_config
    from clipo_megatron.runner.policy import build_policy

    hf, tok = load_hf_policy(
        cfg.model.source,
        tiny_hidden=cfg.model.tiny_hidden,
        tiny_layers=cfg.model.tiny_layers,
        seed=cfg.seed,
    )
    model, arch = build_policy(hf, layout.tp, layout.pp)
    # The KL term's reference: the initial policy, frozen (rebuilt the same way on resume).
    ref_model = None
    if reference:
        ref_model = build_policy(hf, layout.tp, layout.pp)[0]
        ref_model.requires_grad_(False)
    split = layout.model_parallel
    backend = "hf" if split and cfg.rollout.backend == "auto" else cfg.rollout.backend
    gen = None
    if parallel.is_rank0():
        gen = build_rollout_generator(
            backend,
            hf,
            tok,
            arch,
            export_dir=Path(cfg.output.dir) / "generator_hf",
            seed=cfg.seed,
            max_model_len=max_model_len(cfg),
        )
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay
    )
    torch.manual_seed(cfg.seed + 1)
    # The head and its trainer live on the last pipeline stage only (built on every rank so
    # every rank draws the same random numbers); `clipo_step` broadcasts r_CL to the others.
    # The baseline (CLIPO off) builds none.
    head: HeadTrainer | None = None
    if cfg.clipo.head_runs:
        module = build_contrastive_head(
            transformer_config(arch),
            input_size=arch.hidden_size,
            embed_dim=cfg.clipo.method.embed_dim,
            head_type=cfg.clipo.method.head_type,
        )
        if layout.is_last_stage:
            attach_head(model, module)
            head = HeadTrainer(module, cfg.clipo.method)
    return RunModels(tok, model, arch, ref_model, gen, optimizer, head)
