# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Training curves and the t-SNE of head embeddings (paper appendix figure), as PNG; for
`clipo-megatron compare`, two arms' curves overlaid and the paired differences as bars.

A step without a valid CLIPO group has no contrastive loss or cosine: it is a
gap in the curves, not a point at 0. The t-SNE uses the Okabe-Ito colours and
two marker shapes, so correct / incorrect reads without colour vision too.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

# Okabe-Ito palette (colour-blind safe), and a marker per class.
CORRECT_STYLE = {"c": "#0072B2", "marker": "o", "label": "correct"}
INCORRECT_STYLE = {"c": "#E69F00", "marker": "X", "label": "incorrect"}
# Curves that exist only for steps with at least one valid group (mixed correctness).
CONTRASTIVE_KEYS = ("clipo/loss", "clipo/pos_cos", "clipo/pos_neg_gap")

CURVE_KEYS = (
    ("reward/mean", "verifiable reward"),
    ("clipo/loss", "contrastive loss"),
    ("clipo/pos_cos", "positive-pair cosine"),
    ("clipo/pos_neg_gap", "pos - neg cosine gap"),
)
# `clipo-megatron compare`: one colour and marker per arm (Okabe-Ito).
ARM_STYLES = (
    {"color": "#0072B2", "marker": "o"},
    {"color": "#E69F00", "marker": "s"},
)


def curve_values(history: list[dict], key: str) -> list[float]:
    """The key per step; NaN (a gap) where it is absent or, for a contrastive curve, where
    the step had no valid group (`clipo/valid_group_frac` == 0)."""
    out = []
    for h in history:
        no_group = key in CONTRASTIVE_KEYS and h.get("clipo/valid_group_frac", 1.0) == 0
        out.append(float("nan") if no_group else float(h.get(key, float("nan"))))
    return out


def has_clipo(history: list[dict]) -> bool:
    """The run trained a CLIPO head (it logged clipo/* at some step); the baseline did not."""
    return any(k.startswith("clipo/") for h in history for k in h)


def empty_panel_note(history: list[dict], key: str) -> str | None:
    """Why a curve has no point at all, in words (else an empty frame reads as a plotting bug):
    the run has no CLIPO, or CLIPO never had a valid group; None when the curve has points."""
    if not all(math.isnan(v) for v in curve_values(history, key)):
        return None
    if key in CONTRASTIVE_KEYS and not has_clipo(history):
        return "no CLIPO in this run (baseline): nothing to plot"
    if key in CONTRASTIVE_KEYS:
        return "no valid CLIPO group at any step: nothing to plot"
    return "not logged in this run"


def rewards_by_step(history: list[dict]) -> dict[int, float]:
    return {h["step"]: float(h["reward/mean"]) for h in history if "reward/mean" in h}


def degenerate_steps(rewards: dict[int, float]) -> list[int]:
    """Steps (step -> mean reward) whose rollouts were all wrong (0) or all right (1): no group
    had a mixed outcome, so no advantage, no CLIPO group, no learning signal at that step. Its
    reward is the draw's, not the policy collapsing (or solving the task)."""
    return sorted(s for s, r in rewards.items() if same_value(r, 0.0) or same_value(r, 1.0))


def degenerate_note(arms: list[dict[int, float]]) -> str | None:
    """The reward panel's note: the steps degenerate in every arm given (step -> mean reward;
    over seeds, 0 or 1 only if every seed's was), None if there are none."""
    if not arms:
        return None
    steps = set(degenerate_steps(arms[0]))
    for rewards in arms[1:]:
        steps &= set(degenerate_steps(rewards))
    if not steps:
        return None
    kinds = {"all right" if same_value(arms[0][s], 1.0) else "all wrong" for s in steps}
    return (
        f"degenerate step {', '.join(map(str, sorted(steps)))}: rollouts "
        f"{' or '.join(sorted(kinds, reverse=True))}, no learning signal"
    )


def _note(ax, text: str | None, inside: bool = False) -> None:
    """Write `text` (notes separated by newlines, each wrapped) on a panel: inside an empty
    frame, or above a drawn one (it hides no data; the title moves up to make room)."""
    if not text:
        return
    wrapped = "\n".join(textwrap.fill(part, 56) for part in text.split("\n"))
    if inside:
        ax.text(0.5, 0.5, wrapped, transform=ax.transAxes, ha="center", va="center", fontsize=8)
        return
    ax.text(0.5, 1.01, wrapped, transform=ax.transAxes, ha="center", va="bottom", fontsize=8)
    ax.set_title(ax.get_title(), pad=6 + 11 * (wrapped.count("\n") + 1))


def plot_curves(history: list[dict], path: Path, title: str = "") -> None:
    """One run's curves; an empty panel says why (`empty_panel_note`), the reward panel names
    degenerate steps (`degenerate_steps`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = CURVE_KEYS
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.4))
    steps = [h["step"] for h in history]
    for ax, (k, label) in zip(axes, keys):
        ax.plot(steps, curve_values(history, k), marker="o", ms=3)
        ax.set_title(label, pad=18)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        _note(ax, empty_panel_note(history, k), inside=True)
        if k == "reward/mean":
            _note(ax, degenerate_note([rewards_by_step(history)]))
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
        for mask, style in ((~y, INCORRECT_STYLE), (y, CORRECT_STYLE)):
            if mask.any():  # an empty class would still get a legend entry
                ax.scatter(z[mask, 0], z[mask, 1], s=16, **style)
        which = "first" if key == "start" else "last"
        step = e.get("step")
        at = f"step {step}" if step is not None else f"{which} step"
        ax.set_title(f"head embeddings, {at} ({which} of training)", pad=18)
        ax.set_xticks(np.array([]))
        ax.set_yticks(np.array([]))
        ax.legend(loc="best", fontsize=8)
        _note(ax, tsne_note(y))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tsne_note(correct) -> str | None:
    """A t-SNE panel whose rollouts are all one class says so (its legend shows only that one)."""
    n_right = int(sum(bool(c) for c in correct))
    if n_right == 0:
        return f"no correct rollout at this step (all {len(correct)} incorrect)"
    if n_right == len(correct):
        return f"no incorrect rollout at this step (all {len(correct)} correct)"
    return None


def mean_curve(histories: list[list[dict]], key: str) -> tuple[list[int], list[float]]:
    """(steps, the mean over runs per step), skipping each run's gaps (all gaps: NaN)."""
    steps = sorted({h["step"] for hist in histories for h in hist})
    by_step: dict[int, list[float]] = {s: [] for s in steps}
    for hist in histories:
        for h, v in zip(hist, curve_values(hist, key)):
            if not math.isnan(v):
                by_step[h["step"]].append(v)
    return steps, [sum(v) / len(v) if v else float("nan") for v in by_step.values()]


def same_value(a: float, b: float) -> bool:
    """Equal up to fp noise: a plot cannot show the two apart (bit-identical runs included)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def curves_coincide(a: dict[int, float], b: dict[int, float]) -> bool:
    """Two curves (step -> value) draw as one line: they share at least one step where both
    have a value (NaN: a gap, skipped) and agree (`same_value`) at every such step."""
    both = [s for s in a.keys() & b.keys() if not (math.isnan(a[s]) or math.isnan(b[s]))]
    return bool(both) and all(same_value(a[s], b[s]) for s in both)


def plot_arms_overlaid(arms: dict[str, list[list[dict]]], path: Path, title: str = "") -> None:
    """The training curves of two arms (e.g. CLIPO and its baseline) in one figure, each the mean
    over its seeds' runs (label -> one history per seed). A panel whose two curves coincide
    (`curves_coincide`) says so in words: otherwise a reader sees one curve, not two."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVE_KEYS), figsize=(4 * len(CURVE_KEYS), 3.4))
    curves: list[list[dict[int, float]]] = [[] for _ in CURVE_KEYS]  # per panel: per arm
    for (label, hists), style in zip(arms.items(), ARM_STYLES):
        seeds = f" (mean of {len(hists)} seeds)" if len(hists) > 1 else ""
        for ax, (k, _), panel in zip(axes, CURVE_KEYS, curves):
            steps, ys = mean_curve(hists, k)
            ax.plot(steps, ys, ms=3, label=label + seeds, **style)
            panel.append(dict(zip(steps, ys)))
    names = list(arms)
    clipo_on = [any(has_clipo(h) for h in hists) for hists in arms.values()]
    for ax, (key, name), panel in zip(axes, CURVE_KEYS, curves):
        ax.set_title(name, pad=18)  # room for a note between the title and the plot
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        notes = []
        if len(panel) == 2 and curves_coincide(*panel):
            notes.append(f"{names[0]} = {names[1]} at every step: one line hides the other")
        if key in CONTRASTIVE_KEYS:
            notes += [f"{n}: no CLIPO, no curve" for n, on in zip(names, clipo_on) if not on]
        if key == "reward/mean":
            notes.append(degenerate_note(panel) or "")
        _note(ax, ";\n".join(n for n in notes if n))
    axes[0].legend(loc="best", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def zero_difference(cell: dict | None) -> bool:
    """A paired difference of 0 in every seed (mean 0, no interval or a zero-width one): its bar
    and whisker have no height, so the chart must say it in words."""
    if not cell:
        return False
    ends = [] if cell["low"] is None else [cell["low"], cell["high"]]
    return all(same_value(v, 0.0) for v in [cell["mean"], *ends])


def differences_title(diffs: dict[str, dict[str, dict]], metrics: list[str], whiskers: bool) -> str:
    """The paired-differences chart's title: what the whiskers are, and with one seed (no
    interval) that the bars are single runs' differences, not a verdict."""
    if whiskers:
        title = "paired difference per objective (whiskers: 95 % t-interval over seeds)"
    else:
        title = "paired difference per objective\none seed: no interval, not a verdict"
    cells = [c for d in diffs.values() for m in metrics if (c := d.get(m))]
    if cells and all(zero_difference(c) for c in cells):
        title += "\nevery difference is 0: the arms are identical on these metrics"
    return title


def plot_paired_differences(diffs: dict[str, dict[str, dict]], labels: dict[str, str], path: Path):
    """Bars of CLIPO minus baseline per objective (groups: metrics), whiskers = 95 % interval
    where there is one (2+ seeds). diffs: objective -> metric -> {mean, low, high}. A zero
    difference (`zero_difference`) is labelled "0: identical", and the title says when all are."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    objectives, metrics = list(diffs), list(labels)
    width = 0.8 / max(1, len(objectives))
    fig, ax = plt.subplots(figsize=(2.2 + 2.4 * len(metrics), 3.6))
    x = np.arange(len(metrics))
    whiskers = False
    for j, obj in enumerate(objectives):
        cells = [diffs[obj].get(m) for m in metrics]
        means = [c["mean"] if c else np.nan for c in cells]
        err = np.array(
            [
                [c["mean"] - c["low"], c["high"] - c["mean"]]
                if c and c["low"] is not None
                else [np.nan, np.nan]
                for c in cells
            ]
        ).T  # [2, M]
        xs = x + (j - (len(objectives) - 1) / 2) * width
        bars = ax.bar(xs, means, width, label=obj)
        texts = [
            "0: identical" if zero_difference(c) else f"{m:+.3f}" for c, m in zip(cells, means)
        ]
        ax.bar_label(bars, labels=texts, fontsize=7)
        ax.errorbar(xs, means, yerr=err, fmt="none", c="k", capsize=3)
        whiskers = whiskers or not np.isnan(err).all()
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x, [labels[m] for m in metrics], fontsize=8)
    ax.set_ylabel("CLIPO minus baseline")
    ax.set_title(differences_title(diffs, metrics, whiskers))
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
