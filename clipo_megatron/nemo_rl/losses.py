# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Policy losses in NeMo-RL's `LossFunction` protocol (nemo_rl/algorithms/loss/interfaces.py @ 7ea279a).

Protocol: attributes `loss_type` (token / sequence level: which global count
normalises the loss) and `input_type`; `__call__(..., data, global_valid_seqs,
global_valid_toks) -> (loss, metrics)`, where `loss` of one microbatch / DP
shard is its *share* of the global loss (local sum / global count), so the
shares add up across microbatches and ranks; `metric_normalizations` says
which global count each metric was divided by.

Every objective comes from the registry (`core/objectives.py`):
- `in_nemo_rl` objectives (grpo / dapo / gspo) run NeMo-RL's own
  `ClippedPGLossFn` with `Objective.nemo_rl_loss_config()`;
- the others (gmpo) run `ObjectiveLossFn`, which wraps `Objective.loss`.
`build_policy_loss(objective, loss_cfg)` picks between the two.

The enums come from NeMo-RL when it is installed, else from local mirrors
with the same values, so this module imports without it.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

from clipo_megatron.core.objectives import get_objective

try:  # NeMo-RL's own enums where it is installed: its dispatch compares by identity
    from nemo_rl.algorithms.loss.interfaces import LossInputType, LossType
except ImportError:  # mirrors of NeMo-RL's enums (same member values)

    class LossType(enum.Enum):  # type: ignore[no-redef]
        TOKEN_LEVEL = "token_level"
        SEQUENCE_LEVEL = "sequence_level"

    class LossInputType(enum.Enum):  # type: ignore[no-redef]
        LOGIT = "logit"
        LOGPROB = "logprob"


try:  # main (7ea279a) declares metric normalisations; v0.7.0 has no MetricNormalizer
    from nemo_rl.algorithms.loss.interfaces import MetricNormalizer
except ImportError:

    class MetricNormalizer(enum.Enum):  # type: ignore[no-redef]
        TOKENS = "tokens"
        SEQUENCES = "sequences"
        NONE = "none"


def _slice_next(data: dict, key: str) -> torch.Tensor:
    return data[key][:, 1:]


class ObjectiveLossFn:
    """A registry objective that NeMo-RL does not compute (`in_nemo_rl=False`; today GMPO),
    wrapping `Objective.loss` in the LossFunction protocol.

    Takes the `loss_fn:` keys of NeMo-RL's ClippedPGLossConfig that it can honour
    (`ratio_clip_min/max`, `reference_policy_kl_penalty`, `token_level_loss`);
    a key left out takes the objective's paper default. token_level_loss: token-mean
    over the batch, normalised by `global_valid_toks`; else seq-mean-token-mean by
    `global_valid_seqs`. Same data keys as ClippedPGLossFn (`advantages` [B, S] per
    token, `prev_logprobs`, `token_mask`, `sample_mask`; position 0 dropped).
    """

    input_type = LossInputType.LOGPROB

    def __init__(self, objective: str, **loss_cfg: Any):
        self.objective = get_objective(objective)
        if self.objective.in_nemo_rl:
            raise ValueError(
                f"objective {objective!r} runs in NeMo-RL's ClippedPGLossFn; "
                "build it with build_policy_loss"
            )
        obj = self.objective
        self.eps_low = float(loss_cfg.get("ratio_clip_min", obj.eps_low))
        self.eps_high = float(loss_cfg.get("ratio_clip_max", obj.eps_high))
        if self.eps_low <= 0 or self.eps_high <= 0:
            raise ValueError(
                f"{obj.name} clips log-ratios to [-{self.eps_low}, {self.eps_high}]; set "
                f"loss_fn.ratio_clip_min/max > 0 (paper: {obj.eps_low} / {obj.eps_high})"
            )
        self.kl_coef = float(loss_cfg.get("reference_policy_kl_penalty", obj.kl_coef))
        token_level = bool(loss_cfg.get("token_level_loss", obj.aggregation == "token-mean"))
        self.aggregation = "token-mean" if token_level else "seq-mean-token-mean"
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
            eps_low=self.eps_low,
            eps_high=self.eps_high,
            aggregation=self.aggregation,
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


def policy_loss_config(objective: str) -> dict[str, Any]:
    """NeMo-RL `loss_fn:` settings (ClippedPGLossConfig keys) of a registry objective."""
    return get_objective(objective).nemo_rl_loss_config()


def build_policy_loss(objective: str, loss_cfg: dict[str, Any]):
    """NeMo-RL's ClippedPGLossFn (imported lazily) where the objective is `in_nemo_rl`,
    else `ObjectiveLossFn` over the registry's kernel."""
    if not get_objective(objective).in_nemo_rl:
        return ObjectiveLossFn(objective, **loss_cfg)
    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn

    return ClippedPGLossFn(ClippedPGLossConfig(**loss_cfg))
