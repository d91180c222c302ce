# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Training curves and the t-SNE of head embeddings (paper appendix figure), as PNG."""

from __future__ import annotations

from pathlib import Path


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
        ax.plot(steps, [h.get(k, float("nan")) for h in history], marker="o", ms=3)
        ax.set_title(label)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tsne(embeddings: dict, path: Path, seed: int = 0) -> None:
    """Head embeddings of the first and last step's rollouts, coloured by correctness."""
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
        ax.scatter(z[~y, 0], z[~y, 1], c="tab:red", s=14, label="incorrect")
        ax.scatter(z[y, 0], z[y, 1], c="tab:green", s=14, label="correct")
        ax.set_title(f"head embeddings, {key} of training")
        ax.set_xticks(np.array([]))
        ax.set_yticks(np.array([]))
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
