# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Training curves and the t-SNE of head embeddings (paper appendix figure), as PNG.

A step without a valid CLIPO group has no contrastive loss or cosine: it is a
gap in the curves, not a point at 0. The t-SNE uses the Okabe-Ito colours and
two marker shapes, so correct / incorrect reads without colour vision too.
"""

from __future__ import annotations

from pathlib import Path

# Okabe-Ito palette (colour-blind safe), and a marker per class.
CORRECT_STYLE = {"c": "#0072B2", "marker": "o", "label": "correct"}
INCORRECT_STYLE = {"c": "#E69F00", "marker": "X", "label": "incorrect"}
# Curves that exist only for steps with at least one valid group (mixed correctness).
CONTRASTIVE_KEYS = ("clipo/loss", "clipo/pos_cos", "clipo/pos_neg_gap")


def curve_values(history: list[dict], key: str) -> list[float]:
    """The key per step; NaN (a gap) where it is absent or, for a contrastive curve, where
    the step had no valid group (`clipo/valid_group_frac` == 0)."""
    out = []
    for h in history:
        no_group = key in CONTRASTIVE_KEYS and h.get("clipo/valid_group_frac", 1.0) == 0
        out.append(float("nan") if no_group else float(h.get(key, float("nan"))))
    return out


def plot_curves(history: list[dict], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [
        ("reward/mean", "verifiable reward"),
        ("clipo/loss", "contrastive loss"),
        ("clipo/pos_cos", "positive-pair cosine"),
        ("clipo/pos_neg_gap", "pos - neg cosine gap"),
    ]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2))
    steps = [h["step"] for h in history]
    for ax, (k, label) in zip(axes, keys):
        ax.plot(steps, curve_values(history, k), marker="o", ms=3)
        ax.set_title(label)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tsne(embeddings: dict, path: Path, seed: int = 0) -> None:
    """Head embeddings of the first and last step's rollouts, by correctness (colour + marker);
    each panel's title names its step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from sklearn.manifold import TSNE

    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, key in zip(axes, ("start", "end")):
        e = embeddings.get(key)
        if e is None:
            continue
        x = e["emb"].float().numpy()
        y = e["correct"].numpy() > 0.5
        perplexity = max(2.0, min(30.0, (len(x) - 1) / 3))
        z = TSNE(
            n_components=2, perplexity=perplexity, random_state=seed, init="pca"
        ).fit_transform(x)
        ax.scatter(z[~y, 0], z[~y, 1], s=16, **INCORRECT_STYLE)
        ax.scatter(z[y, 0], z[y, 1], s=16, **CORRECT_STYLE)
        which = "first" if key == "start" else "last"
        step = e.get("step")
        at = f"step {step}" if step is not None else f"{which} step"
        ax.set_title(f"head embeddings, {at} ({which} of training)")
        ax.set_xticks(np.array([]))
        ax.set_yticks(np.array([]))
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
