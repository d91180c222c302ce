# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The plots say what the run did: gaps for steps without a valid group, a readable pass@1
axis when every score is 0, a colour-blind-safe t-SNE that names its steps."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("matplotlib")


@pytest.fixture
def captured_figures(monkeypatch):
    """The figures the plot functions save, kept open for inspection."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    yield figs
    for f in figs:
        matplotlib.pyplot.figure(f.number)
        f.clf()


def _history():
    return [
        {"step": 0, "reward/mean": 0.5, "clipo/loss": 1.2, "clipo/valid_group_frac": 0.5},
        # no valid group: the head loss was logged as 0.0 over no anchor
        {"step": 1, "reward/mean": 1.0, "clipo/loss": 0.0, "clipo/valid_group_frac": 0.0},
        {"step": 2, "reward/mean": 0.25, "clipo/loss": 0.9, "clipo/valid_group_frac": 0.25},
    ]


def test_step_without_valid_group_is_a_gap_not_zero(tmp_path, captured_figures):
    from clipo_megatron.runner.plots import curve_values, plot_curves

    got = curve_values(_history(), "clipo/loss")
    assert got[0] == 1.2 and math.isnan(got[1]) and got[2] == 0.9
    assert curve_values(_history(), "reward/mean") == [0.5, 1.0, 0.25]  # not a contrastive curve
    plot_curves(_history(), tmp_path / "curves.png")
    (fig,) = captured_figures
    loss_ax = next(a for a in fig.axes if a.get_title() == "contrastive loss")
    y = loss_ax.lines[0].get_ydata()
    assert y[0] == 1.2 and math.isnan(y[1]) and y[2] == 0.9
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_pass_at_1_axis_when_every_score_is_zero(tmp_path, captured_figures):
    from clipo_megatron.eval.report import bar_chart

    bar_chart({"base": {"gsm8k": 0.0, "math": 0.0}}, tmp_path / "scores.png")
    (fig,) = captured_figures
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo == 0 and hi >= 100  # a percentage axis, not -0.04..0.04
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["0.0", "0.0"]  # zero bars are labelled


def test_tsne_palette_markers_and_steps(tmp_path, captured_figures):
    pytest.importorskip("sklearn")
    from matplotlib.colors import to_hex

    from clipo_megatron.runner.plots import CORRECT_STYLE, INCORRECT_STYLE, plot_tsne

    g = torch.Generator().manual_seed(0)
    correct = torch.tensor([1.0, 0.0] * 6)

    def emb(step):
        return {"emb": torch.randn(12, 4, generator=g), "correct": correct, "step": step}

    plot_tsne({"start": emb(0), "end": emb(9)}, tmp_path / "tsne.png")
    (fig,) = captured_figures
    titles = [a.get_title() for a in fig.axes]
    assert titles == [
        "head embeddings, step 0 (first of training)",
        "head embeddings, step 9 (last of training)",
    ]
    for ax in fig.axes:
        wrong, right = ax.collections
        assert to_hex(wrong.get_facecolor()[0]) == INCORRECT_STYLE["c"].lower()
        assert to_hex(right.get_facecolor()[0]) == CORRECT_STYLE["c"].lower()
        # different shapes: the two markers' paths differ
        assert not (wrong.get_paths()[0].vertices.shape == right.get_paths()[0].vertices.shape)
        assert len(wrong.get_offsets()) == 6 and len(right.get_offsets()) == 6


NOTE = "CLIPO = GRPO at every step: one line hides the other"


def test_curves_coincide_up_to_fp_noise_skipping_gaps():
    from clipo_megatron.runner.plots import curves_coincide

    nan = float("nan")
    a = {0: 0.5, 1: 1.2, 2: nan, 3: 0.1}
    assert curves_coincide(a, dict(a))  # bit-identical
    assert curves_coincide(a, {**a, 1: 1.2 + 2e-16, 3: 0.1 * 3 / 3})  # fp noise: one line drawn
    assert curves_coincide(a, {**a, 2: 7.0})  # a gap in one arm is no disagreement
    assert curves_coincide(a, {0: 0.5, 1: 1.2})  # steps one arm lacks are skipped
    assert not curves_coincide(a, {**a, 3: 0.1 + 1e-6})  # 1e-6 apart at one step: two lines
    assert not curves_coincide(a, {s: nan for s in a})  # the baseline's absent contrastive loss
    assert not curves_coincide({}, {})


def _texts(fig) -> dict[str, list[str]]:
    return {ax.get_title(): [t.get_text() for t in ax.texts] for ax in fig.axes}


def test_overlaid_curves_say_when_one_line_hides_the_other(tmp_path, captured_figures):
    """Both arms sampled the same rollouts: the panels where they agree say so; where they
    differ, or one arm has no curve, nothing is written."""
    from clipo_megatron.runner.plots import plot_arms_overlaid

    same = {"CLIPO": [_history()], "GRPO": [_history()]}
    plot_arms_overlaid(same, tmp_path / "same.png")
    gap = _history()
    del gap[2]["reward/mean"]  # a NaN gap in one arm's reward at step 2
    baseline = [{k: v for k, v in h.items() if not k.startswith("clipo/")} for h in _history()]
    baseline[2]["reward/mean"] = 0.5  # the arms' rewards part at step 2
    plot_arms_overlaid({"CLIPO": [gap], "GRPO": [_history()]}, tmp_path / "gap.png")
    plot_arms_overlaid({"CLIPO": [_history()], "GRPO": [baseline]}, tmp_path / "apart.png")
    same_fig, gap_fig, apart_fig = captured_figures
    assert _texts(same_fig) == {
        "verifiable reward": [NOTE],
        "contrastive loss": [NOTE],  # its step-1 gap in both arms is skipped
        "positive-pair cosine": [],  # no values in either arm: nothing drawn, nothing hidden
        "pos - neg cosine gap": [],
    }
    assert _texts(gap_fig)["verifiable reward"] == [NOTE]
    assert all(t == [] for t in _texts(apart_fig).values())


def test_paired_differences_say_when_a_difference_is_zero(tmp_path, captured_figures):
    from clipo_megatron.runner.plots import plot_paired_differences

    labels = {"pass@1_after": "pass@1 after", "train_reward_last": "reward last"}
    zero = {"mean": 0.0, "low": None, "high": None}
    plot_paired_differences(
        {"grpo": {"pass@1_after": zero, "train_reward_last": {**zero, "low": 0.0, "high": 0.0}}},
        labels,
        tmp_path / "zero.png",
    )
    mixed = {"pass@1_after": zero, "train_reward_last": {"mean": 0.0, "low": -0.1, "high": 0.1}}
    plot_paired_differences({"grpo": mixed}, labels, tmp_path / "mixed.png")
    (zero_ax,), (mixed_ax,) = (f.axes for f in captured_figures)
    assert [t.get_text() for t in zero_ax.texts] == ["0: identical", "0: identical"]
    assert zero_ax.get_title().endswith(
        "\nevery difference is 0: the arms are identical on these metrics"
    )
    # a zero mean with a real interval is a measured difference that happens to be 0.000
    assert [t.get_text() for t in mixed_ax.texts] == ["0: identical", "+0.000"]
    assert "every difference is 0" not in mixed_ax.get_title()
