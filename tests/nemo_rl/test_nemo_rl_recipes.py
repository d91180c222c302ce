# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO over every GRPO Megatron recipe of NeMo-RL: each verdict of docs/nemo_rl_recipes.md held.

Each of NeMo-RL's recipes (NEMO_RL_SRC, else the NeMo-RL 7ea279a source beside this checkout) is
overlaid with the CLIPO mixin as the guide's one step says, then preflighted as
`--validate-only --no-cluster-env` does. A recipe whose verdict changes (a loop accepted, a
refusal for another key) turns this red; regenerate the table with
`python -m clipo_megatron.nemo_rl.guard.recipe_verdicts --nemo-rl-src <src>` only for a reason.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.guard.recipe_verdicts import grpo_megatron_recipes, sweep

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "nemo_rl_recipes.md"
SNAPSHOT = ROOT.parent / "shared" / "upstream" / "NeMo-RL-7ea279a"
SRC = Path(os.environ.get("NEMO_RL_SRC") or SNAPSHOT)
ROW = re.compile(r"^\| `(grpo-[^`]+)` \| (\S+) \| (\d+) \| ([^|]+) \| ([^|]*) \|$")

pytestmark = pytest.mark.skipif(
    not (SRC / "examples" / "configs" / "recipes" / "llm").is_dir() or not os.access(SRC, os.R_OK),
    reason=f"needs NeMo-RL's recipes: set NEMO_RL_SRC or lay the 7ea279a source at {SNAPSHOT}",
)


def documented() -> dict[str, tuple[str, int, str, str]]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line.strip())
        if m:
            rows[m.group(1)] = (m.group(2), int(m.group(3)), m.group(4).strip(), m.group(5).strip())
    return rows


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """One sweep for the module; $HF_HOME points at an empty folder, as on a fresh node."""
    old = {k: os.environ.get(k) for k in ("HF_HOME", "NEMO_RL_ROOT")}
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf_home"))
    try:
        return {v.recipe: v for v in sweep(SRC)}
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_the_table_lists_every_grpo_megatron_recipe():
    names = {p.name for p in grpo_megatron_recipes(SRC)}
    assert names and set(documented()) == names


def test_each_recipe_gets_its_documented_verdict(verdicts):
    table = documented()
    wrong = [
        f"{name}: documented {table[name]}, got {(v.loop, v.ep, v.verdict, v.record)} ({v.line})"
        for name, v in verdicts.items()
        if table.get(name) != (v.loop, v.ep, v.verdict, v.record)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_counts_say_how_many_accepted_recipes_clipo_has_run_with_in_full():
    accepted = [row for row in documented().values() if row[2] == "accepted"]
    full = sum("✗" not in row[3] for row in accepted)
    text = DOC.read_text(encoding="utf-8")
    assert f"| accepted | {len(accepted)} (" in text
    assert (
        f"every model family and feature of {full} of them; the other {len(accepted) - full} use"
        in text
    ), (len(accepted), full)


def test_no_recipe_of_another_loop_is_accepted(verdicts):
    """Only recipes of the loops CLIPO's driver runs (grpo_train, async_grpo_train,
    grpo_train_sync) pass; the SingleController's do not."""
    from clipo_megatron.nemo_rl.port.loops import SUPPORTED

    runs = {lp.name for lp in SUPPORTED}
    slipped = [n for n, v in verdicts.items() if v.loop not in runs and v.verdict == "accepted"]
    assert not slipped
    for loop in runs:
        assert any(v.loop == loop and v.verdict == "accepted" for v in verdicts.values()), loop


def test_every_refusal_is_one_line_naming_its_key(verdicts):
    for v in verdicts.values():
        if v.line:
            assert "\n" not in v.line and "Traceback" not in v.line
            assert v.line.startswith(v.verdict.removeprefix("refused: "))


def _guide_overlay() -> str:
    """The first YAML block of docs/nemo_rl.md ("CLIPO in your NeMo-RL recipe"), as written."""
    text = (ROOT / "docs" / "nemo_rl.md").read_text(encoding="utf-8")
    section = text.split("## CLIPO in your NeMo-RL recipe", 1)[1]  # the opening's names <recipe>
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_guides_one_step_switch_keeps_every_nemo_rl_key(tmp_path, monkeypatch):
    """The guide's file turns CLIPO on, turns leave-one-out off and changes no other key of the
    NeMo-RL recipe it names."""
    from clipo_megatron.nemo_rl.guard.preflight import preflight
    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    monkeypatch.setenv("NEMO_RL_ROOT", str(SRC))
    overlay = tmp_path / "my_recipe.yaml"
    overlay.write_text(_guide_overlay(), encoding="utf-8")
    report = preflight(overlay, [], cluster_env=False)
    assert report.ok, report.problems
    parent = overlay.read_text().split("- nemo_rl:", 1)[1].split()[0]
    recipe = load_recipe(SRC / parent)
    config = dict(report.config or {})
    assert config.pop("clipo")["enabled"] is True
    loo = ("use_leave_one_out_baseline",)
    assert config["grpo"]["use_leave_one_out_baseline"] is False
    assert config["grpo"]["adv_estimator"]["use_leave_one_out_baseline"] is False
    for block in (config, recipe):
        for key in loo:
            block["grpo"].pop(key)
            block["grpo"]["adv_estimator"].pop(key)
    assert config == recipe
