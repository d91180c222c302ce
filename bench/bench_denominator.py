# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What the InfoNCE denominator choice does to the contrastive reward.

With the authors' denominator (every other rollout of the group, other
positives included) the SupCon loss of an anchor is >= log(k - 1) for k
correct rollouts whatever the embeddings, and so is the InfoNCE loss in
expectation over the positive draw (one draw can be ~0: docs/method.md).
With lambda = 0.2 and the -0.5 clamp (0.2 * log 13 = 0.513) a group with
k >= 14 of 16 correct is pushed to the full penalty unless the drawn
positive happens to sit much closer than the others. The
`positive_and_negatives` variant keeps only the sampled positive and the
negatives, so the reward reflects the geometry.

For each k (correct rollouts in a group of 16) this prints the mean anchor
reward under both denominators for two embedding geometries: "clustered"
(correct rollouts near one direction, wrong ones elsewhere: what CLIPO
wants) and "random" (no structure). 64 groups per cell, seed 0.

The second table is the paper's per-sample formula against the code's: the paper's InfoNCE
(Sec. 3.2, the per-sample contrastive loss) sums its denominator over j = 1..G, the anchor's own
s_ii = 1/tau included; the authors' code and this project leave the anchor out
(`denominator_includes_anchor`, default false). It prints the within-group spread of r_CL
among a group's correct anchors (the sample standard deviation, averaged over groups): the
only thing by which CLIPO changes GRPO's advantages (docs/method.md). With the anchor kept,
exp(1/tau) dominates the denominator, L_i ~ (1 - cos(i, p)) / tau, and r_CL reaches the -0.5
clamp once the sampled positive sits below cosine 1 - 0.5 tau / lambda (0.875 at tau 0.05).

    python bench/bench_denominator.py
"""

from __future__ import annotations

import torch

from clipo_megatron.core import CLIPOConfig, contrastive_rewards, group_contrastive_loss


def batch(k: int, geometry: str, groups: int = 64, g: int = 16, d: int = 64, seed: int = 0):
    gen = torch.Generator().manual_seed(seed + k)
    correct = torch.zeros(groups, g, dtype=torch.long)
    correct[:, :k] = 1
    emb = torch.randn(groups, g, d, generator=gen)
    if geometry == "clustered":
        centre = torch.randn(groups, 1, d, generator=gen) * 3
        emb = emb * 0.3 + centre * correct.unsqueeze(-1)
    gids = torch.arange(groups).repeat_interleave(g)
    return emb.reshape(-1, d), correct.reshape(-1), gids


def mean_anchor_reward(k: int, geometry: str, denominator: str) -> tuple[float, float]:
    cfg = CLIPOConfig(denominator=denominator)
    emb, correct, gids = batch(k, geometry)
    res = group_contrastive_loss(emb, correct, gids, cfg)
    r = contrastive_rewards(res, cfg)[res.anchor_mask]
    return float(r.mean()), float((r <= cfg.reward_clip_min + 1e-9).float().mean())


def within_group_spread(
    k: int, geometry: str, tau: float, includes_anchor: bool
) -> tuple[float, float]:
    """(mean over groups of the sd of r_CL over the k correct anchors, fraction clamped)."""
    cfg = CLIPOConfig(temperature=tau, denominator_includes_anchor=includes_anchor)
    emb, correct, gids = batch(k, geometry)
    res = group_contrastive_loss(emb, correct, gids, cfg)
    r = contrastive_rewards(res, cfg).reshape(-1, 16)[:, :k]  # [groups, k]: the correct anchors
    clamped = (r <= cfg.reward_clip_min + 1e-9).float().mean()
    return float(r.std(dim=1).mean()), float(clamped)


def main() -> None:
    print(
        "InfoNCE: mean r_CL of correct anchors (fraction at the -0.5 clamp), groups of 16, "
        "tau 0.05, lambda 0.2\n"
    )
    print(
        "| k correct | clustered, all_others | clustered, pos+neg | random, all_others | random, pos+neg |"
    )
    print("|---|---|---|---|---|")
    for k in (2, 4, 8, 12, 14, 15):
        cells = []
        for geometry in ("clustered", "random"):
            for den in ("all_others", "positive_and_negatives"):
                m, frac = mean_anchor_reward(k, geometry, den)
                cells.append(f"{m:+.3f} ({frac:.0%})")
        print(f"| {k} | " + " | ".join(cells) + " |")
    print(
        "\nInfoNCE: within-group sd of r_CL over the correct anchors (fraction at the -0.5 clamp), "
        "anchor left out (code) | kept in (paper's formula), groups of 16, lambda 0.2\n"
    )
    print(
        "| tau | k correct | clustered, left out | clustered, kept | random, left out | random, kept |"
    )
    print("|---|---|---|---|---|---|")
    for tau in (0.05, 0.02):
        for k in (4, 8, 12, 14):
            cells = []
            for geometry in ("clustered", "random"):
                for includes in (False, True):
                    sd, frac = within_group_spread(k, geometry, tau, includes)
                    cells.append(f"{sd:.4f} ({frac:.0%})")
            print(f"| {tau} | {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
