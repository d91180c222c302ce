# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Typed, validated CLIPO configuration.

One dataclass holds every knob of the method (paper Sec. 3 and App. Tables
"Default Contrastive Head Parameters"). It is validated at construction so a
bad value fails at config-load time with a message that names the field,
not deep inside a training step.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Self

from clipo_megatron.core.bounds import ROLLOUTS_PER_PROMPT, Range
from clipo_megatron.core.key_names import unknown_keys_line
from clipo_megatron.core.method_bounds import (
    METHOD_CHOICES,
    METHOD_KEY,
    METHOD_RANGES,
    NULLABLE_KNOBS,
)
from clipo_megatron.grader_names import GRADERS

if TYPE_CHECKING:
    import torch

    from clipo_megatron.core.contrastive_kernels import ContrastiveLoss
    from clipo_megatron.core.objectives import Objective

# A name in the contrastive-loss registry (core/contrastive_kernels.py): infonce | supcon | softnn.
LossType = str
Similarity = Literal["cosine", "dot"]
Anchors = Literal["correct", "all", "incorrect"]
Denominator = Literal["all_others", "positive_and_negatives"]
HeadType = Literal["linear", "mlp"]


@dataclass
class CLIPOConfig:
    """CLIPO method configuration.

    Defaults are the paper's Track I/II settings and the authors' public code.
    """

    # Group contrastive loss, a name in core/contrastive_kernels.py's registry:
    # InfoNCE (paper default), SupCon ("out"), SoftNN.
    loss_type: LossType = "infonce"
    # s_ij = e_i . e_j / temperature. Paper default 0.05 (ablation liked 0.02).
    temperature: float = 0.05
    # "cosine": embeddings are L2-normalised before the dot product (paper);
    # "dot": raw dot product of head outputs.
    similarity: Similarity = "cosine"
    # Which rollouts are anchors. Positives of an anchor are the other rollouts
    # of its group with the same correctness (authors' `masked_label`):
    # "correct" (default, masked_label=0), "all" (-1), "incorrect" (1).
    anchors: Anchors = "correct"
    # Whether an incorrect anchor (anchors "all" / "incorrect") also turns its loss
    # into its reward. False (authors): incorrect rollouts are anchors of the head
    # loss only and get no contrastive reward (c in a valid group, else 0), so a
    # failed rollout keeps r_i. True: r_CL = max(c - lambda * L_i, clip_min) for
    # every counted anchor, down to clip_min for a failed rollout (not in the paper).
    reward_incorrect_anchors: bool = False
    # Softmax denominator per anchor. "all_others" (authors): every other
    # rollout of the group, other positives included, so with k correct
    # rollouts the SupCon loss of a correct anchor is >= log(k-1), and so is the
    # InfoNCE loss on average over the positive draw (one draw can be ~0:
    # docs/method.md).
    # "positive_and_negatives": only the sampled positive (InfoNCE) / the
    # positives being scored plus the negatives.
    denominator: Denominator = "all_others"
    # Whether the anchor's own similarity s_ii = 1/tau enters its denominator.
    # The paper's eq. sums j = 1..G (self included); the authors' code removes
    # the diagonal (default False, matching the code).
    denominator_includes_anchor: bool = False
    # r_CL = max(constant - lambda * L_i, clip_min) for anchors. None (default)
    # follows the loss: the paper's 0.2 for InfoNCE/SupCon, 1.0 for SoftNN
    # (the registry's `default_lambda`); read it through `lam`, the one place it is resolved.
    reward_lambda: float | None = None
    reward_clip_min: float = -0.5
    reward_constant: float = 0.0
    # Contrastive head: linear D -> d without bias, or Linear-ReLU-Linear.
    head_type: HeadType = "linear"
    embed_dim: int = 512
    # The head's own AdamW (one full-batch step per RL step).
    head_lr: float = 1e-3
    head_weight_decay: float = 0.01
    # RL steps during which only the head learns (policy not updated).
    # Paper: one epoch = 14 steps (Track I), 58 steps (Track II).
    warmup_steps: int = 0
    # Never update the head (paper ablation).
    fixed_head: bool = False
    # Seed of the counter-based positive sampler (identical on every rank).
    seed: int = 1234
    # Optional upper bound on rollouts per group (e.g. n_samples); a group id
    # seen more often than this is rejected as a layout error.
    max_group_size: int | None = None
    # The authors' code adds eps inside the log of every max-shifted denominator sum (and of
    # SoftNN's positive sum): log(sum_j exp(s_ij - M_i) + eps) + M_i, M_i the row max (s_ii =
    # 1/tau for cosine). That is a phantom negative at cosine 1 + tau ln(eps): 0.63 at tau
    # 0.02, 0.08 at 0.05 for eps 1e-8. 0 (default): off; 1e-8: the authors' (reproduce recipes).
    log_eps: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        loss = _contrastive_loss(self.loss_type)  # one error naming the registered losses
        for name, choices in METHOD_CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"{METHOD_KEY}.{name}={value!r} is not one of {choices}")
        for name in ("reward_incorrect_anchors", "denominator_includes_anchor", "fixed_head"):
            _require(isinstance(getattr(self, name), bool), name, "must be a bool (true or false)")
        for name, rule in METHOD_RANGES.items():
            value = getattr(self, name)
            if value is None and name in NULLABLE_KNOBS:
                continue
            if name == "reward_lambda":  # the default it falls back to, named in the error
                rule = replace(
                    rule,
                    note=f"or null, i.e. None for the loss's paper default: "
                    f"{loss.default_lambda} for {loss.name}",
                )
            rule.check(f"{METHOD_KEY}.{name}", value)
        _require(
            not (self.reward_incorrect_anchors and self.anchors == "correct"),
            "reward_incorrect_anchors",
            "needs anchors='all' or 'incorrect' (with anchors='correct' no incorrect "
            "rollout is an anchor); set anchors or drop the flag",
        )

    @property
    def lam(self) -> float:
        """Reward weight lambda: `reward_lambda` if set, else the paper's value for the loss."""
        if self.reward_lambda is not None:
            return float(self.reward_lambda)
        return _contrastive_loss(self.loss_type).default_lambda

    @classmethod
    def from_dict(cls, cfg: dict[str, Any] | None) -> CLIPOConfig:
        """Build from a plain / OmegaConf mapping, rejecting unknown keys by name."""
        cfg = dict(cfg or {})
        if "enabled" in cfg:
            raise ValueError(
                "`enabled` is not a method key: the one switch is clipo.enabled "
                "(move it out of the method block)"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(unknown_keys_line("clipo.method.", unknown, known))
        return cls(**cfg)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ClipoBlock:
    """The `clipo:` block both drivers read, and the switch's rules: their one home.

    `enabled: false` is the plain baseline (the paper's GRPO is `objective: grpo` with CLIPO
    off): no head is built, trained or checkpointed, r_CL = 0, no warm-up. Both drivers ask
    this block `head_runs`, `policy_updates_at(step)`, `is_correct(rewards)` and
    `check_run(...)` instead of reading `enabled` themselves. The NeMo-RL driver extends the
    block with its integration knobs (`nemo_rl/config.py`).
    """

    enabled: bool = True
    # A name in the objective registry (core/objectives.py): grpo | dapo | gspo | gmpo.
    objective: str = "grpo"
    # A rollout is "correct" (a CLIPO positive) when its verifiable reward >= this
    # (authors: reward > 0 on 0 / 1 rewards).
    correct_reward_threshold: float = 0.5
    # The verifiable reward's grader, a name in grader_names.py's GRADERS: "math_verify"
    # (recommended: math-verify, lenient option letters) or "paper" (the authors' checker,
    # verify/paper.py; the reproduction recipes). Both drivers' rewards and their evaluation.
    grader: str = "math_verify"
    # DAPO's dynamic sampling (groups whose rewards are all equal are dropped): None follows
    # the objective (on for dapo); false turns it off. The authors' verl trainer has none:
    # their DAPO rows are clip-higher only (the reproduction recipes set false).
    dynamic_sampling: bool | None = None
    method: CLIPOConfig = field(default_factory=CLIPOConfig)

    def __post_init__(self) -> None:
        from clipo_megatron.core.objectives import get_objective

        if not isinstance(self.enabled, bool):
            raise ValueError(f"clipo.enabled={self.enabled!r} must be true or false")
        t = self.correct_reward_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise ValueError(f"clipo.correct_reward_threshold={t!r} must be a finite number")
        get_objective(self.objective)  # one error naming the registered objectives
        if self.grader not in GRADERS:
            raise ValueError(f"clipo.grader={self.grader!r} is not one of {sorted(GRADERS)}")
        if self.dynamic_sampling is not None and not isinstance(self.dynamic_sampling, bool):
            raise ValueError(
                f"clipo.dynamic_sampling={self.dynamic_sampling!r} must be true, false or null "
                "(null: the objective's own)"
            )

    def policy_objective(self) -> Objective:
        """The registry objective with this block's `dynamic_sampling` where set."""
        from clipo_megatron.core.objectives import get_objective

        obj = get_objective(self.objective)
        if self.dynamic_sampling is None or self.dynamic_sampling == obj.dynamic_sampling:
            return obj
        return dataclasses.replace(obj, dynamic_sampling=self.dynamic_sampling)

    @property
    def head_runs(self) -> bool:
        """Whether the contrastive head is built, trained and checkpointed (off: the baseline)."""
        return self.enabled

    def policy_updates_at(self, step: int) -> bool:
        """The warm-up rule: at 0-based RL step `step` the policy is updated only after the head
        has trained alone for `method.warmup_steps` steps (paper: one epoch); always when off."""
        return not self.enabled or step >= self.method.warmup_steps

    def is_correct(self, rewards: torch.Tensor) -> torch.Tensor:
        """[B] verifiable rewards -> [B] bool CLIPO positives (reward >= the threshold), host."""
        if rewards.dim() != 1:
            raise ValueError(f"rewards must be [B], got {tuple(rewards.shape)}")
        return rewards.detach().cpu().float() >= self.correct_reward_threshold

    def check_run(
        self, *, n: int, steps: int | None, leave_one_out: bool, keys: dict[str, str]
    ) -> None:
        """The cross-field rules with the driver's blocks; one line naming the key and the fix.

        n: rollouts per prompt; steps: total RL steps (None: unbounded); leave_one_out: the
        advantage baseline. keys: the driver's names for "n", "steps", "leave_one_out".
        """
        m = self.method
        ROLLOUTS_PER_PROMPT.check(keys["n"], n)
        if steps is not None:
            Range(1, integer=True).check(keys["steps"], steps)
        if m.max_group_size is not None and m.max_group_size < n:
            raise ValueError(
                f"clipo.method.max_group_size={m.max_group_size} < {keys['n']}={n}; "
                "raise it or leave it null"
            )
        if not self.enabled:
            return
        if n < 3:
            raise ValueError(
                f"{keys['n']}={n}: a CLIPO group needs >= 2 correct and >= 1 incorrect rollouts, "
                f"so set {keys['n']} >= 3 (paper: 16) or clipo.enabled=false"
            )
        if steps is not None and m.warmup_steps >= steps:
            raise ValueError(
                f"clipo.method.warmup_steps={m.warmup_steps} >= {keys['steps']}={steps}: the "
                f"policy would never be updated; lower the warm-up or raise {keys['steps']}"
            )
        if leave_one_out:
            raise ValueError(
                f"{keys['leave_one_out']}=true with CLIPO: r' is continuous and the leave-one-out "
                "std of near-equal peers gives |A| up to 1e6 (docs/method.md); set it to false"
            )

    @classmethod
    def from_dict(cls, cfg: dict[str, Any] | None) -> Self:
        """Build from a plain / OmegaConf mapping; an unknown key is named with the one meant."""
        cfg = dict(cfg or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            method_keys = {f.name for f in dataclasses.fields(CLIPOConfig)}
            moved = [k for k in unknown if k in method_keys]
            where = f" ({', '.join(moved)}: a method knob, under clipo.method)" if moved else ""
            raise ValueError(unknown_keys_line("clipo.", unknown, known) + where)
        method = cfg.pop("method", None)
        m = method if isinstance(method, CLIPOConfig) else CLIPOConfig.from_dict(method)
        return cls(method=m, **cfg)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _contrastive_loss(name: str) -> ContrastiveLoss:
    """The registry entry of `name` (imported here: the registry imports torch, this module not)."""
    from clipo_megatron.core.contrastive_kernels import get_contrastive_loss

    return get_contrastive_loss(name)


def _require(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise ValueError(f"{METHOD_KEY}.{name} {why}")
