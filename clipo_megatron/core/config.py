# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The `clipo:` block both drivers read: its dataclasses and every rule on its values.

`CLIPOConfig` holds every knob of the method (paper Sec. 3 and App. Tables "Default Contrastive
Head Parameters"), `ClipoBlock` the switch, the objective and the grader around it. Both are
validated at construction, so a bad value fails at config-load time with a message that names
the key, not deep inside a training step. The knobs only NeMo-RL's driver has
(`clipo.head_tensor_parallel`, ...) are NeMo-RL integration keys: `nemo_rl/config.py`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Self, get_args

from clipo_megatron.core.bounds import RL_STEPS, ROLLOUTS_PER_PROMPT, Range, bool_problem
from clipo_megatron.core.key_names import unknown_keys_line
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

# The key the method block has in both drivers' configs: errors name it, not the class.
METHOD_KEY = "clipo.method"
METHOD_CHOICES: dict[str, tuple[str, ...]] = {  # the Literal types above, the one statement
    "similarity": get_args(Similarity),
    "anchors": get_args(Anchors),
    "denominator": get_args(Denominator),
    "head_type": get_args(HeadType),
}
# The method's numeric knobs and their ranges (the `Range` rules: core/bounds.py).
# tau: the logits are cos / tau, so 1 / tau must stay far inside fp32; lambda, the constant
# and the floor: r_CL = max(c - lambda * L, clip_min) stays finite for the losses tau allows.
METHOD_RANGES: dict[str, Range] = {
    "temperature": Range(1e-3, 10, note="paper 0.05, ablated 0.02 - 0.2"),
    "reward_lambda": Range(0, 100),
    "reward_clip_min": Range(-100, 0, note="a floor on a penalty; paper -0.5"),
    "reward_constant": Range(-100, 100, note="paper 0"),
    "embed_dim": Range(1, 65536, integer=True, note="paper 512 / 2048"),
    "head_lr": Range(0, 1, note="paper 1e-3"),
    "head_weight_decay": Range(0, 1, note="paper 0.01"),
    "warmup_steps": Range(0, integer=True),
    "seed": Range(0, 2**31 - 1, integer=True),
    "max_group_size": Range(2, integer=True, note="or null"),
    "log_eps": Range(0, 1e-2, note="0: off; the authors' code: 1e-8"),
}
# Knobs whose null (None) means "the default follows the loss / no bound", so skip the range.
NULLABLE_KNOBS = frozenset({"reward_lambda", "max_group_size"})


@dataclass
class CLIPOConfig:
    """CLIPO's method knobs (`clipo.method`): the paper's Track I/II defaults, the authors' code."""

    # Group contrastive loss, a name in core/contrastive_kernels.py's registry: InfoNCE (paper
    # default), SupCon ("out"), SoftNN.
    loss_type: LossType = "infonce"
    # s_ij = e_i . e_j / temperature. Paper default 0.05 (ablation liked 0.02).
    temperature: float = 0.05
    # "cosine": embeddings L2-normalised before the dot product (paper); "dot": raw head outputs.
    similarity: Similarity = "cosine"
    # Which rollouts are anchors; an anchor's positives are the other rollouts of its group with
    # its correctness (authors' `masked_label`: "correct" 0, the default, "all" -1, "incorrect" 1).
    anchors: Anchors = "correct"
    # Whether an incorrect anchor also turns its loss into its reward. False (authors): it is an
    # anchor of the head loss only, its reward keeps r_i. True: r_CL = max(c - lambda * L_i,
    # clip_min) for every counted anchor, down to clip_min for a failed rollout (not in the paper).
    reward_incorrect_anchors: bool = False
    # Softmax denominator per anchor. "all_others" (authors): every other rollout of the group,
    # other positives included (a correct anchor's SupCon loss is then >= log(k-1) for k correct:
    # docs/method.md). "positive_and_negatives": the positive(s) being scored plus the negatives.
    denominator: Denominator = "all_others"
    # Whether s_ii = 1/tau enters the anchor's denominator: the paper's eq. sums j = 1..G, the
    # authors' code removes the diagonal (default False, as the code).
    denominator_includes_anchor: bool = False
    # r_CL = max(constant - lambda * L_i, clip_min) for anchors. None (default) follows the loss
    # (the registry's `default_lambda`: paper 0.2 InfoNCE/SupCon, 1.0 SoftNN); read it as `lam`.
    reward_lambda: float | None = None
    reward_clip_min: float = -0.5
    reward_constant: float = 0.0
    # Contrastive head: linear D -> d without bias, or Linear-ReLU-Linear.
    head_type: HeadType = "linear"
    embed_dim: int = 512
    # The head's own AdamW (one full-batch step per RL step).
    head_lr: float = 1e-3
    head_weight_decay: float = 0.01
    # RL steps during which only the head learns (paper: one epoch, 14 / 58 steps Track I / II).
    warmup_steps: int = 0
    # Never update the head (paper ablation).
    fixed_head: bool = False
    # Seed of the counter-based positive sampler (identical on every rank).
    seed: int = 1234
    # Optional upper bound on rollouts per group; a group id seen more often is a layout error.
    max_group_size: int | None = None
    # The authors' code adds eps inside the log of every max-shifted denominator sum (and SoftNN's
    # positive sum): a phantom negative at cosine 1 + tau ln(eps), 0.63 at tau 0.02 for eps 1e-8.
    # 0 (default): off; 1e-8: the authors' (the reproduction recipes).
    log_eps: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        loss = _contrastive_loss(self.loss_type)  # one error naming the registered losses
        for name, choices in METHOD_CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"{METHOD_KEY}.{name}={value!r} is not one of {choices}")
        for name in ("reward_incorrect_anchors", "denominator_includes_anchor", "fixed_head"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{METHOD_KEY}.{name} must be a bool (true or false)")
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
        if self.reward_incorrect_anchors and self.anchors == "correct":
            raise ValueError(
                f"{METHOD_KEY}.reward_incorrect_anchors needs anchors='all' or 'incorrect' (with "
                "anchors='correct' no incorrect rollout is an anchor); set anchors or drop the flag"
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
        _refuse_unknown(cls, cfg, "clipo.method.")
        return cls(**cfg)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ClipoBlock:
    """The `clipo:` block both drivers read, and the switch's rules: their one home.

    `enabled: false` is the plain baseline (the paper's GRPO is `objective: grpo` with CLIPO off):
    no head is built, trained or checkpointed, r_CL = 0, no warm-up. Both drivers ask this block
    `head_runs`, `policy_updates_at(step)`, `is_correct(rewards)` and `check_run(...)` instead of
    reading `enabled`. NeMo-RL's driver extends it with its knobs (`nemo_rl/config.py`)."""

    enabled: bool = True
    # A name in the objective registry (core/objectives.py): grpo | dapo | gspo | gmpo.
    objective: str = "grpo"
    # A rollout is "correct" (a CLIPO positive) when its reward >= this (authors: reward > 0).
    correct_reward_threshold: float = 0.5
    # The reward's grader (both drivers' rewards and evaluation), a name in GRADERS: "math_verify"
    # (recommended: lenient option letters) or "paper" (the authors' checker, verify/paper.py).
    grader: str = "math_verify"
    # DAPO's dynamic sampling (groups whose rewards are all equal are dropped): None follows
    # the objective (on for dapo); false turns it off. The authors' verl trainer has none:
    # their DAPO rows are clip-higher only (the reproduction recipes set false).
    dynamic_sampling: bool | None = None
    method: CLIPOConfig = field(default_factory=CLIPOConfig)

    def __post_init__(self) -> None:
        from clipo_megatron.core.objectives import get_objective

        if problem := bool_problem("clipo.enabled", self.enabled):
            raise ValueError(problem)
        t = self.correct_reward_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise ValueError(f"clipo.correct_reward_threshold={t!r} must be a finite number")
        get_objective(self.objective)  # one error naming the registered objectives
        check_grader("clipo.grader", self.grader)
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
            RL_STEPS.check(keys["steps"], steps)
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
        moved = [k for k in cfg if k in _field_names(CLIPOConfig) and k not in _field_names(cls)]
        where = f" ({', '.join(sorted(moved))}: a method knob, under clipo.method)" if moved else ""
        _refuse_unknown(cls, cfg, "clipo.", where)
        method = cfg.pop("method", None)
        m = method if isinstance(method, CLIPOConfig) else CLIPOConfig.from_dict(method)
        return cls(method=m, **cfg)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_grader(key: str, grader: Any, fix: str = "") -> None:
    """The grader rule: a name in grader_names.py's GRADERS (`fix`: appended to the error)."""
    if grader not in GRADERS:
        raise ValueError(f"{key}={grader!r} is not one of {sorted(GRADERS)}{fix}")


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _refuse_unknown(cls: type, cfg: dict[str, Any], prefix: str, where: str = "") -> None:
    """ValueError naming each key of `cfg` that is not a field of `cls`, with the one meant."""
    known = _field_names(cls)
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(unknown_keys_line(prefix, unknown, known) + where)


def _contrastive_loss(name: str) -> ContrastiveLoss:
    """The registry entry of `name` (imported here: the registry imports torch, this module not)."""
    from clipo_megatron.core.contrastive_kernels import get_contrastive_loss

    return get_contrastive_loss(name)
