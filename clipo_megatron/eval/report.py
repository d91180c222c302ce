# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Markdown tables and a bar chart for one run or a comparison of runs."""

from __future__ import annotations

from pathlib import Path

from clipo_megatron.data.registry import SPECS


def label(column: str) -> str:
    """The paper's column name for a dataset (GSM8K, SYM, ...); averages keep theirs."""
    return SPECS[column].label if column in SPECS else column


def _fmt(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def markdown_table(comparison: dict) -> str:
    """Rows: each run, and under every non-baseline run its Δ row (as the paper's tables)."""
    cols = comparison["columns"]
    lines = ["| run | " + " | ".join(label(c) for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, scores in comparison["scores"].items():
        lines.append(f"| {name} | " + " | ".join(_fmt(scores[c]) for c in cols) + " |")
        if name in comparison["deltas"]:
            d = comparison["deltas"][name]
            lines.append(
                f"| Δ vs {comparison['baseline']} | "
                + " | ".join(_fmt(d[c], True) for c in cols)
                + " |"
            )
    return "\n".join(lines) + "\n"


def bar_chart(
    runs: dict[str, dict[str, float]], path: str | Path, title: str = "pass@1 (%)"
) -> Path:
    """Grouped bars: one group per dataset / average, one bar per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols: list[str] = []
    for s in runs.values():
        cols += [c for c in s if c not in cols]
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(cols) * max(1, len(runs)) / 1.5), 4.0))
    for k, (name, scores) in enumerate(runs.items()):
        xs = [i + (k - (len(runs) - 1) / 2) * width for i in range(len(cols))]
        bars = ax.bar(xs, [scores.get(c) or 0.0 for c in cols], width, label=name)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)  # a 0 bar is still read as 0, not as missing
    # pass@1 in %: a fixed 0..100 axis (matplotlib gives all-zero scores an empty -0.04..0.04)
    top = max([100.0] + [v or 0.0 for s in runs.values() for v in s.values()])
    ax.set_ylim(0, top * 1.05)
    ax.set_xticks(range(len(cols)), [label(c) for c in cols], rotation=30, ha="right")
    ax.set_ylabel(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
