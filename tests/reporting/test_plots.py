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
    from clipo_megatron.reporting.plots import curve_values, plot_curves

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

    from clipo_megatron.reporting.plots import CORRECT_STYLE, INCORRECT_STYLE, plot_tsne

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
    from clipo_megatron.reporting.plots import curves_coincide

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
    """Each panel's notes, line breaks (wrapping) read as spaces."""
    return {ax.get_title(): [" ".join(t.get_text().split()) for t in ax.texts] for ax in fig.axes}


def test_overlaid_curves_say_when_one_line_hides_the_other(tmp_path, captured_figures):
    """Both arms sampled the same rollouts: the panels where they agree say so; where they
    differ, or one arm has no curve, nothing is written."""
    from clipo_megatron.reporting.plots import plot_arms_overlaid

    same = {"CLIPO": [_history()], "GRPO": [_history()]}
    plot_arms_overlaid(same, tmp_path / "same.png")
    gap = _history()
    del gap[2]["reward/mean"]  # a NaN gap in one arm's reward at step 2
    baseline = [{k: v for k, v in h.items() if not k.startswith("clipo/")} for h in _history()]
    baseline[2]["reward/mean"] = 0.5  # the arms' rewards part at step 2
    plot_arms_overlaid({"CLIPO": [gap], "GRPO": [_history()]}, tmp_path / "gap.png")
    plot_arms_overlaid({"CLIPO": [_history()], "GRPO": [baseline]}, tmp_path / "apart.png")
    same_fig, gap_fig, apart_fig = captured_figures
    degenerate = "degenerate step 1: rollouts all right, no learning signal"  # reward 1.0
    assert _texts(same_fig) == {
        "verifiable reward": [f"{NOTE}; {degenerate}"],
        "contrastive loss": [NOTE],  # its step-1 gap in both arms is skipped
        "positive-pair cosine": [],  # no values in either arm: nothing drawn, nothing hidden
        "pos - neg cosine gap": [],
    }
    assert _texts(gap_fig)["verifiable reward"] == [f"{NOTE}; {degenerate}"]
    no_curve = ["GRPO: no CLIPO, no curve"]  # the baseline arm has no clipo/* at all
    assert _texts(apart_fig) == {
        "verifiable reward": [degenerate],
        "contrastive loss": no_curve,
        "positive-pair cosine": no_curve,
        "pos - neg cosine gap": no_curve,
    }


def test_paired_differences_say_when_a_difference_is_zero(tmp_path, captured_figures):
    from clipo_megatron.reporting.plots import plot_paired_differences

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


def test_empty_panel_says_why():
    from clipo_megatron.reporting.plots import empty_panel_note

    baseline = [{k: v for k, v in h.items() if not k.startswith("clipo/")} for h in _history()]
    assert empty_panel_note(baseline, "clipo/loss") == (
        "no CLIPO in this run (baseline): nothing to plot"
    )
    assert empty_panel_note(baseline, "reward/mean") is None
    never_valid = [{**h, "clipo/valid_group_frac": 0.0} for h in _history()]
    assert empty_panel_note(never_valid, "clipo/loss") == (
        "no valid CLIPO group at any step: nothing to plot"
    )
    assert empty_panel_note(_history(), "clipo/loss") is None  # steps 0 and 2 have points
    # CLIPO on, but this curve never logged: not "no CLIPO"
    assert empty_panel_note(_history(), "clipo/pos_cos") == (
        "no valid CLIPO group at any step: nothing to plot"
    )


def test_baseline_curves_png_notes_its_empty_panels(tmp_path, captured_figures):
    from clipo_megatron.reporting.plots import plot_curves

    baseline = [{k: v for k, v in h.items() if not k.startswith("clipo/")} for h in _history()]
    plot_curves(baseline, tmp_path / "curves.png")
    (fig,) = captured_figures
    no_clipo = ["no CLIPO in this run (baseline): nothing to plot"]
    assert _texts(fig) == {
        "verifiable reward": ["degenerate step 1: rollouts all right, no learning signal"],
        "contrastive loss": no_clipo,
        "positive-pair cosine": no_clipo,
        "pos - neg cosine gap": no_clipo,
    }


def test_degenerate_steps_all_wrong_or_all_right_in_every_arm():
    from clipo_megatron.reporting.plots import degenerate_note, degenerate_steps

    clipo = {0: 0.1875, 1: 0.0, 6: 0.52, 7: 0.0, 8: 1.0}
    grpo = {0: 0.1875, 1: 0.0625, 6: 0.56, 7: 0.0, 8: 1.0}
    assert degenerate_steps(clipo) == [1, 7, 8] and degenerate_steps(grpo) == [7, 8]
    assert degenerate_steps({0: 1e-17, 1: 1 - 1e-17, 2: 1 / 48}) == [0, 1]  # fp noise, 1 of 48
    assert degenerate_note([clipo, grpo]) == (  # step 1 is degenerate in one arm only
        "degenerate step 7, 8: rollouts all wrong or all right, no learning signal"
    )
    assert (
        degenerate_note([{7: 0.0}]) == "degenerate step 7: rollouts all wrong, no learning signal"
    )
    assert degenerate_note([{0: 0.5}, {0: 0.0}]) is None and degenerate_note([]) is None


def test_tsne_step_without_a_correct_rollout_says_so(tmp_path, captured_figures):
    pytest.importorskip("sklearn")
    from clipo_megatron.reporting.plots import plot_tsne, tsne_note

    assert tsne_note(torch.zeros(12)) == "no correct rollout at this step (all 12 incorrect)"
    assert tsne_note(torch.ones(5)) == "no incorrect rollout at this step (all 5 correct)"
    assert tsne_note(torch.tensor([1.0, 0.0])) is None
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(12, 4, generator=g)
    plot_tsne(
        {
            "start": {"emb": emb, "correct": torch.tensor([1.0, 0.0] * 6), "step": 0},
            "end": {"emb": emb, "correct": torch.zeros(12), "step": 7},
        },
        tmp_path / "tsne.png",
    )
    (fig,) = captured_figures
    start, end = fig.axes
    assert [t.get_text() for t in start.get_legend().get_texts()] == ["incorrect", "correct"]
    assert [t.get_text() for t in start.texts] == []
    assert [t.get_text() for t in end.get_legend().get_texts()] == ["incorrect"]
    assert [t.get_text() for t in end.texts] == [
        "no correct rollout at this step (all 12 incorrect)"
    ]
    assert len(end.collections) == 1 and len(end.collections[0].get_offsets()) == 12


def test_one_seed_differences_are_not_a_verdict(tmp_path, captured_figures):
    from clipo_megatron.reporting.plots import differences_title, plot_paired_differences

    labels = {"pass@1_after": "pass@1 after"}
    one = {"grpo": {"pass@1_after": {"mean": -0.07, "low": None, "high": None}}}
    three = {"grpo": {"pass@1_after": {"mean": -0.03, "low": -0.16, "high": 0.10}}}
    assert differences_title(one, list(labels), whiskers=False) == (
        "paired difference per objective\none seed: no interval, not a verdict"
    )
    assert differences_title(three, list(labels), whiskers=True) == (
        "paired difference per objective (whiskers: 95 % t-interval over seeds)"
    )
    plot_paired_differences(one, labels, tmp_path / "one.png")
    plot_paired_differences(three, labels, tmp_path / "three.png")
    (one_ax,), (three_ax,) = (f.axes for f in captured_figures)
    assert "one seed: no interval, not a verdict" in one_ax.get_title()
    assert "not a verdict" not in three_ax.get_title()
