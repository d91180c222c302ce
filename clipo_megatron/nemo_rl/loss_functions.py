# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Policy losses in NeMo-RL's `LossFunction` protocol (nemo_rl/algorithms/loss/interfaces.py).

Protocol: attributes `loss_type` (token / sequence level: which global count
normalises the loss) and `input_type`; `__call__(..., data, global_valid_seqs,
global_valid_toks) -> (loss, metrics)`, where `loss` of one microbatch / DP
shard is its *share* of the global loss (local sum / global count), so the
shares add up across microbatches and ranks; `metric_normalizations` says
which global count each metric was divided by.

Every objective comes from the registry (`core/objectives.py`); this module alone
spells NeMo-RL's `loss_fn:` keys (ClippedPGLossConfig), translating both ways:
`policy_loss_config(objective)` (registry -> keys) and `objective_settings(name, loss_cfg)`
(keys -> the registry objective with the run's values).
- `in_nemo_rl` objectives (grpo / dapo / gspo) run NeMo-RL's own `ClippedPGLossFn`;
- the others (gmpo), and any objective with `loss_fn.kl_gradient: k3` and a KL term (k3's
  own gradient, which ClippedPGLossFn does not offer), run `ObjectiveLossFn`, which wraps
  `Objective.loss`. `build_policy_loss(objective, loss_cfg)` picks between the two.

The enums come from NeMo-RL when it is installed, else from local mirrors
with the same values, so this module imports without it.
"""

from __future__ import annotations

import enum
from dataclasses import replace
from typing import Any

import torch

from clipo_megatron.core.objective_kernels import KL_INPUT_CLAMP, KL_OUTPUT_CLAMP
from clipo_megatron.core.objectives import Objective, get_objective

# Our key in NeMo-RL's `loss_fn:` block (ClippedPGLossConfig allows extra keys): "kl" | "k3".
KL_GRADIENT_KEY = "kl_gradient"
# ClippedPGLossFn switches `Objective.loss` does not compute, with the value it needs.
_FIXED = {
    "reference_policy_kl_type": "k3",
    "kl_input_clamp_value": KL_INPUT_CLAMP,
    "kl_output_clamp_value": KL_OUTPUT_CLAMP,
    "use_on_policy_kl_approximation": False,
    "use_importance_sampling_correction": False,
    "disable_ppo_ratio": False,
    "force_on_policy_ratio": False,
    "use_cispo": False,
    "use_kl_in_reward": False,
    "truncated_importance_sampling_type": None,
    "positive_example_nll_weight": 0.0,
}
# Of those, the ones the recipes write out (the KL form and clamps the parity rests on).
_WRITTEN = (
    "reference_policy_kl_type",
    "kl_input_clamp_value",
    "kl_output_clamp_value",
    "use_on_policy_kl_approximation",
    "use_importance_sampling_correction",
)

try:  # NeMo-RL's own enums where it is installed: its dispatch compares by identity
    from nemo_rl.algorithms.loss.interfaces import LossInputType, LossType
except ImportError:  # mirrors of NeMo-RL's enums (same member values)

    class LossType(enum.Enum):  # type: ignore[no-redef]
        TOKEN_LEVEL = "token_level"
        SEQUENCE_LEVEL = "sequence_level"

    class LossInputType(enum.Enum):  # type: ignore[no-redef]
        LOGIT = "logit"
        LOGPROB = "logprob"


try:  # metric normalisations: declared where the version's probes say MetricNormalizer (port/)
    from nemo_rl.algorithms.loss.interfaces import MetricNormalizer
except ImportError:

    class MetricNormalizer(enum.Enum):  # type: ignore[no-redef]
        TOKENS = "tokens"
        SEQUENCES = "sequences"
        NONE = "none"


def _slice_next(data: dict, key: str) -> torch.Tensor:
    return data[key][:, 1:]


def policy_loss_config(objective: str | Objective) -> dict[str, Any]:
    """NeMo-RL `loss_fn:` settings (ClippedPGLossConfig keys, + `kl_gradient`) of an objective."""
    obj = get_objective(objective) if isinstance(objective, str) else objective
    return {
        **{k: _FIXED[k] for k in _WRITTEN},
        "reference_policy_kl_penalty": obj.kl_coef,
        "ratio_clip_min": obj.eps_low,
        "ratio_clip_max": obj.eps_high,
        "ratio_clip_c": obj.ratio_clip_c,
        "sequence_level_importance_ratios": obj.sequence_level_ratio,
        "token_level_loss": obj.aggregation == "token-mean",
        KL_GRADIENT_KEY: obj.kl_gradient,
    }


def uses_clipped_pg(objective: str, loss_cfg: dict[str, Any]) -> bool:
    """Whether NeMo-RL's ClippedPGLossFn computes the objective with these settings: an
    `in_nemo_rl` objective, unless it has a KL term with k3's own gradient."""
    obj = get_objective(objective)
    k3_kl = loss_cfg.get(KL_GRADIENT_KEY, obj.kl_gradient) == "k3" and (
        float(loss_cfg.get("reference_policy_kl_penalty", obj.kl_coef)) > 0
    )
    return obj.in_nemo_rl and not k3_kl


def check_objective_loss_switches(objective: str, loss_cfg: dict[str, Any]) -> None:
    """One error naming the key for a ClippedPGLossFn switch `Objective.loss` does not compute."""
    for key, want in _FIXED.items():
        got = loss_cfg.get(key, want)
        if got != want:
            raise ValueError(
                f"loss_fn.{key}={got!r}: clipo.objective={objective!r} runs through "
                f"Objective.loss here, which computes {key}={want!r} only; set it to {want!r}"
            )


def objective_settings(objective: str, loss_cfg: dict[str, Any]) -> Objective:
    """The registry objective with a run's `loss_fn:` values (a key left out keeps the
    registry's); one error for a value outside the kernel's domain."""
    obj = get_objective(objective)
    token_level = loss_cfg.get("token_level_loss", obj.aggregation == "token-mean")
    try:
        return replace(
            obj,
            eps_low=float(loss_cfg.get("ratio_clip_min", obj.eps_low)),
            eps_high=float(loss_cfg.get("ratio_clip_max", obj.eps_high)),
            kl_coef=float(loss_cfg.get("reference_policy_kl_penalty", obj.kl_coef)),
            ratio_clip_c=loss_cfg.get("ratio_clip_c", obj.ratio_clip_c),
            aggregation="token-mean" if token_level else "seq-mean-token-mean",
            kl_gradient=loss_cfg.get(KL_GRADIENT_KEY, obj.kl_gradient),
        )
    except ValueError as e:  # the kernel's domain checks (kl_gradient, ratio_clip_c)
        raise ValueError(f"loss_fn: {e}") from None


class ObjectiveLossFn:
    """A registry objective computed by `Objective.loss` in the LossFunction protocol: the ones
    NeMo-RL does not compute (`in_nemo_rl=False`; GMPO) and the k3 KL gradient for any.

    Takes the `loss_fn:` keys (`objective_settings`); a key left out takes the registry's value.
    token_level_loss: token-mean over the batch, normalised by `global_valid_toks`; else
    seq-mean-token-mean by `global_valid_seqs`. Same data keys as ClippedPGLossFn
    (`advantages` [B, S] per token, `prev_logprobs`, `token_mask`, `sample_mask`; position 0 dropped).
    """

    input_type = LossInputType.LOGPROB

    def __init__(self, objective: str, **loss_cfg: Any):
        check_objective_loss_switches(objective, loss_cfg)
        self.objective = obj = objective_settings(objective, loss_cfg)
        self.eps_low, self.eps_high, self.kl_coef = obj.eps_low, obj.eps_high, obj.kl_coef
        if self.eps_low <= 0 or self.eps_high <= 0:
            paper = get_objective(objective)
            raise ValueError(
                f"{obj.name} clips to [-{self.eps_low}, {self.eps_high}]; set "
                f"loss_fn.ratio_clip_min/max > 0 (paper: {paper.eps_low} / {paper.eps_high})"
            )
        token_level = obj.aggregation == "token-mean"
        self.loss_type = LossType.TOKEN_LEVEL if token_level else LossType.SEQUENCE_LEVEL
        norm = MetricNormalizer.TOKENS if token_level else MetricNormalizer.SEQUENCES
        self.metric_normalizations = {
            "loss": norm,
            "probs_ratio_clamped_frac": MetricNormalizer.TOKENS,
            "approx_kl": MetricNormalizer.TOKENS,
            "num_valid_samples": MetricNormalizer.NONE,
            "token_mult_prob_error": MetricNormalizer.TOKENS,
            "gen_kl_error": MetricNormalizer.TOKENS,
        }

    def __call__(
        self,
        next_token_logprobs: torch.Tensor,
        data: dict,
        global_valid_seqs: torch.Tensor,
        global_valid_toks: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        token_mask = _slice_next(data, "token_mask")  # [B, S-1]
        sample_mask = data["sample_mask"]  # [B]
        mask = token_mask * sample_mask.unsqueeze(-1)  # [B, S-1]
        adv = _slice_next(data, "advantages")  # [B, S-1], constant over a sequence's tokens
        # one advantage per sequence: the value on its first response token
        first = torch.argmax((mask > 0).to(torch.int64), dim=1)  # [B]
        adv_seq = adv.gather(1, first.unsqueeze(1)).squeeze(1) * (mask.sum(1) > 0)  # [B]
        ref = _slice_next(data, "reference_policy_logprobs") if self.kl_coef else None
        prev = _slice_next(data, "prev_logprobs").float()  # [B, S-1]
        loss, m = self.objective.loss(
            next_token_logprobs.float(),
            prev,
            adv_seq.float(),
            mask,
            ref_logprobs=None if ref is None else ref.float(),
            kl_coef=self.kl_coef,
            num_tokens=float(global_valid_toks),
            num_seqs=float(global_valid_seqs),
        )
        # Metrics are shares of the global value (local sum / global count), like
        # ClippedPGLossFn's: NeMo-RL sums them over microbatches, DP ranks and, with sequence
        # packing, over the sequences its packing wrapper calls the loss on one at a time.
        share = float(mask.sum()) / max(float(global_valid_toks), 1.0)
        gen = _slice_next(data, "generation_logprobs").float()
        metrics = {
            "loss": float(loss.detach()),
            "probs_ratio_clamped_frac": m["pg/clip_frac"] * share,
            "approx_kl": m["pg/approx_kl"] * share,
            "num_valid_samples": float(sample_mask.sum()),
            **generation_mismatch_metrics(gen, prev, mask, global_valid_toks),
        }
        return loss, metrics


def generation_mismatch_metrics(
    generation_logprobs: torch.Tensor,
    prev_logprobs: torch.Tensor,
    mask: torch.Tensor,
    global_valid_toks: torch.Tensor | float,
) -> dict[str, float]:
    """The rollout-vs-trainer logprob checks grpo_train reads after every update (shares).

    token_mult_prob_error = sum(exp(|gen - prev|) * mask) / global_valid_toks (1.0 = identical);
    gen_kl_error = k3 KL(P_gen || P_train) = sum((e^r - r - 1) * mask) / global_valid_toks,
    r = prev - gen: the definitions of NeMo-RL's ClippedPGLossFn (k3, no clamping).
    """
    denom = max(float(global_valid_toks), 1.0)
    with torch.no_grad():
        err = torch.exp(torch.abs(generation_logprobs - prev_logprobs) * mask)  # [B, S-1]
        r = prev_logprobs - generation_logprobs  # [B, S-1]
        kl = torch.exp(r) - r - 1
        return {
            "token_mult_prob_error": float((err * mask).sum()) / denom,
            "gen_kl_error": float((kl * mask).sum()) / denom,
        }


def build_policy_loss(objective: str, loss_cfg: dict[str, Any]):
    """NeMo-RL's ClippedPGLossFn (imported lazily) where it computes the objective with these
    settings, else `ObjectiveLossFn` over the registry's kernel (module docstring)."""
    if not uses_clipped_pg(objective, loss_cfg):
        return ObjectiveLossFn(objective, **loss_cfg)
    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn

    cfg = {k: v for k, v in loss_cfg.items() if k != KL_GRADIENT_KEY}
    return ClippedPGLossFn(ClippedPGLossConfig(**cfg))
