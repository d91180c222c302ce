# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Losses in NeMo-RL's `LossFunction` protocol (nemo_rl/algorithms/loss/interfaces.py @ 7ea279a).

Protocol: attributes `loss_type` (token / sequence level: which global count
normalises the loss) and `input_type`; `__call__(..., data, global_valid_seqs,
global_valid_toks) -> (loss, metrics)`, where `loss` of one microbatch / DP
shard is its *share* of the global loss (local sum / global count), so the
shares add up across microbatches and ranks; `metric_normalizations` says
which global count each metric was divided by.

- `ContrastiveHeadLossFn`: the CLIPO head loss (mean over the anchors of the
  whole batch: local anchors' sum / global anchor count = global_valid_seqs).
- `GMPOLossFn`: GMPO (geometric mean of clipped token ratios, eps 0.4), not
  in NeMo-RL's ClippedPGLossFn.
- `policy_loss_config(objective)`: the ClippedPGLossFn settings of GRPO /
  DAPO / GSPO (reuse NeMo-RL's loss there); `build_policy_loss(cfg)`.

The enums come from NeMo-RL when it is installed, else from local mirrors
with the same values, so this module imports without it.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

from clipo_megatron.core.config import CLIPOConfig
from clipo_megatron.core.losses import group_contrastive_loss
from clipo_megatron.core.objectives import policy_objective_loss

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


class ClipoInputType(enum.Enum):
    """The head loss consumes head embeddings [B, d], not logits/logprobs."""

    EMBEDDINGS = "clipo_embeddings"


# ---------------------------------------------------------------------------- head loss


class ContrastiveHeadLossFn:
    """CLIPO group contrastive loss for the head, in the LossFunction protocol.

    L = (1 / N_anchor) * sum_{anchors i} L_i  (paper eq. InfoNCE / SupCon / SoftNN),
    groups from `data["clipo_group_ids"]`, positives `data["clipo_correct"]`.
    A shard passes the *gathered* embeddings of every row its groups touch
    (`embeddings` [B, d], the DP all-gather of `megatron.gather.gather_rows`)
    and marks its own rows with `data["clipo_local_mask"]`; its loss is the
    sum over its own anchors divided by `global_valid_seqs` (the global
    anchor count), so the shares of all shards add up to L.
    """

    loss_type = LossType.SEQUENCE_LEVEL
    input_type = ClipoInputType.EMBEDDINGS

    def __init__(self, cfg: CLIPOConfig):
        self.cfg = cfg
        self.metric_normalizations = {
            "clipo_head_loss": MetricNormalizer.SEQUENCES,
            "clipo_num_anchors": MetricNormalizer.NONE,
            "clipo_valid_groups": MetricNormalizer.NONE,
        }

    @staticmethod
    def count_anchors(data: dict[str, torch.Tensor], cfg: CLIPOConfig) -> torch.Tensor:
        """Global normaliser: anchors of the whole batch (call on the full, unsharded data)."""
        z = torch.ones(len(data["clipo_correct"]), 1)  # only the anchor count is used
        res = group_contrastive_loss(
            z,
            data["clipo_correct"],
            data["clipo_group_ids"],
            cfg,
            step=0,
            sample_ids=data.get("clipo_sample_ids"),
        )
        return torch.tensor(float(res.num_anchors))

    def __call__(
        self,
        embeddings: torch.Tensor,
        data: dict[str, torch.Tensor],
        global_valid_seqs: torch.Tensor,
        global_valid_toks: torch.Tensor | None = None,
        *,
        step: int = 0,
    ) -> tuple[torch.Tensor, dict]:
        correct = data["clipo_correct"]
        groups = data["clipo_group_ids"]
        if embeddings.dim() != 2 or embeddings.shape[0] != correct.shape[0]:
            raise ValueError(
                f"embeddings must be [B, d] with B = len(clipo_correct) = {correct.shape[0]}, "
                f"got {tuple(embeddings.shape)}"
            )
        local = data.get("clipo_local_mask")
        res = group_contrastive_loss(
            embeddings,
            correct,
            groups,
            self.cfg,
            step=step,
            sample_ids=data.get("clipo_sample_ids"),
            local_mask=local,
        )
        counted = res.anchor_mask if local is None else res.anchor_mask & local.bool()
        local_sum = (res.per_sample_loss * counted).sum()
        denom = torch.as_tensor(global_valid_seqs, dtype=local_sum.dtype).clamp_min(1)
        loss = local_sum / denom
        metrics = {
            "clipo_head_loss": float(loss.detach()),
            "clipo_num_anchors": float(counted.sum()),
            "clipo_valid_groups": float(res.stats["valid_groups"]),
        }
        return loss, metrics


# ---------------------------------------------------------------------------- policy objectives


def _slice_next(data: dict, key: str) -> torch.Tensor:
    return data[key][:, 1:]


class GMPOLossFn:
    """GMPO (paper App. "GMPO"; Zhao et al. 2025): geometric mean of clipped token ratios.

    l_i = -A_i * exp( mean_t sgn(A_i) * min(sgn(A_i) log rho_t, sgn(A_i) clip(log rho_t, -eps, eps)) ),
    eps = 0.4, aggregated token-mean over the batch (each sequence's term on
    each of its response tokens) — normalised by `global_valid_toks`.
    Optional k3 KL to the reference policy (`reference_policy_kl_penalty`).
    Same data keys as NeMo-RL's ClippedPGLossFn (`advantages` [B, S] per
    token, `prev_logprobs`, `token_mask`, `sample_mask`; position 0 dropped).
    """

    input_type = LossInputType.LOGPROB

    def __init__(
        self,
        *,
        ratio_clip_min: float = 0.4,
        ratio_clip_max: float = 0.4,
        reference_policy_kl_penalty: float = 0.0,
        token_level_loss: bool = True,
    ):
        if ratio_clip_min <= 0 or ratio_clip_max <= 0:
            raise ValueError(
                f"GMPO clips log-ratios to [-{ratio_clip_min}, {ratio_clip_max}]; both must be > 0 "
                "(paper: 0.4)"
            )
        self.eps_low = ratio_clip_min
        self.eps_high = ratio_clip_max
        self.kl_coef = reference_policy_kl_penalty
        self.loss_type = LossType.TOKEN_LEVEL if token_level_loss else LossType.SEQUENCE_LEVEL
        norm = MetricNormalizer.TOKENS if token_level_loss else MetricNormalizer.SEQUENCES
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
        agg = "token-mean" if self.loss_type == LossType.TOKEN_LEVEL else "seq-mean-token-mean"
        lp = next_token_logprobs.float()
        loss, m = policy_objective_loss(
            lp,
            _slice_next(data, "prev_logprobs").float(),
            adv_seq.float(),
            mask,
            objective="gmpo",
            eps_low=self.eps_low,
            eps_high=self.eps_high,
            aggregation=agg,
            ref_logprobs=None if ref is None else ref.float(),
            kl_coef=self.kl_coef,
            num_tokens=float(global_valid_toks),
            num_seqs=float(global_valid_seqs),
        )
        # Metrics are shares of the global value (local sum / global count), like
        # ClippedPGLossFn's: NeMo-RL sums them over microbatches, DP ranks and, with sequence
        # packing, over the sequences its packing wrapper calls the loss on one at a time.
        local_toks = float(mask.sum())
        share = local_toks / max(float(global_valid_toks), 1.0)
        gen = _slice_next(data, "generation_logprobs").float()
        prev = _slice_next(data, "prev_logprobs").float()
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
    """NeMo-RL `loss_fn:` settings for the paper's objectives (App. "baseline objectives").

    grpo: symmetric clip 0.2, token-mean, KL loss coef 0.001 (k3);
    dapo: clip 0.2 / 0.28, token-mean, no KL (+ grpo.use_dynamic_sampling);
    gspo: sequence-level ratio, clip 3e-4 / 4e-4, seq-mean-token-mean, no KL;
    gmpo: log-ratio clip 0.4, token-mean (this package's GMPOLossFn).
    """
    base = {
        "reference_policy_kl_type": "k3",
        "ratio_clip_c": None,
        "use_on_policy_kl_approximation": False,
        "use_importance_sampling_correction": False,
        "sequence_level_importance_ratios": False,
        "token_level_loss": True,
    }
    table = {
        "grpo": {
            "ratio_clip_min": 0.2,
            "ratio_clip_max": 0.2,
            "reference_policy_kl_penalty": 0.001,
        },
        "dapo": {"ratio_clip_min": 0.2, "ratio_clip_max": 0.28, "reference_policy_kl_penalty": 0.0},
        "gspo": {
            "ratio_clip_min": 3e-4,
            "ratio_clip_max": 4e-4,
            "reference_policy_kl_penalty": 0.0,
            "sequence_level_importance_ratios": True,
            "token_level_loss": False,
        },
        "gmpo": {"ratio_clip_min": 0.4, "ratio_clip_max": 0.4, "reference_policy_kl_penalty": 0.0},
    }
    if objective not in table:
        raise ValueError(f"objective {objective!r} is not one of {sorted(table)}")
    return {**base, **table[objective]}


def build_policy_loss(objective: str, loss_cfg: dict[str, Any]):
    """GMPOLossFn for gmpo; NeMo-RL's ClippedPGLossFn (imported lazily) for grpo / dapo / gspo."""
    if objective == "gmpo":
        return GMPOLossFn(
            ratio_clip_min=loss_cfg.get("ratio_clip_min", 0.4),
            ratio_clip_max=loss_cfg.get("ratio_clip_max", 0.4),
            reference_policy_kl_penalty=loss_cfg.get("reference_policy_kl_penalty", 0.0),
            token_level_loss=loss_cfg.get("token_level_loss", True),
        )
    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn

    return ClippedPGLossFn(ClippedPGLossConfig(**loss_cfg))
