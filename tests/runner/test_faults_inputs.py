# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Fault class: inputs without bounds (issue 24, item 8; numeric knobs: test_hardening_numbers).

- Malformed YAML was a 33-line traceback: now one line naming file:line:column (a recipe
  that is not a mapping, and an override that is not YAML, likewise), exit 2, for train,
  compare and eval alike.
- A data row that is a JSON scalar was a TypeError: now one line naming file:line.
- A 200 MB question ran the box out of memory minutes in: rows and files are read within
  size caps (data.max_row_chars, data.max_file_mb), checked before any model loads.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron import cli  # noqa: E402
from clipo_megatron.data.files import SizeCaps, read_rows  # noqa: E402
from clipo_megatron.runner import train  # noqa: E402

from .faults import QUIET, ModelBuilt, refused  # noqa: E402

ROW = {"question": "What is 2 + 2?", "answer": "#### 4"}


def _cli_error(capsys, argv) -> str:
    """The one stderr line of a CLI command that returned 2 (the dispatcher's own check)."""
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("sub", ["train", "compare", "eval"])
@pytest.mark.parametrize(
    "text, where, problem",
    [
        ("train:\n  steps: 3\n lr: [1,\n", ":3:2", "did not find expected key"),
        ("train: {steps: 3}\ntrain: {lr: 1}\n", ":2:1", "found duplicate key train"),
        ("train:\n\tsteps: 3\n", ":2:1", "found character that cannot start any token"),
    ],
)
def test_malformed_yaml_is_one_line_naming_file_and_line(
    tmp_path, capsys, no_model, sub, text, where, problem
):
    bad = tmp_path / "recipe.yaml"
    bad.write_text(text)
    line = _cli_error(capsys, [sub, "--config", str(bad), f"output.dir={tmp_path / 'o'}"])
    assert line == f"clipo-megatron {sub}: error: {bad}{where}: malformed YAML ({problem})"
    assert not (tmp_path / "o").exists()


def test_a_recipe_that_is_not_a_mapping_is_named(tmp_path, capsys):
    bad = tmp_path / "list.yaml"
    bad.write_text(
        "- train\n- steps\n"
    )  # was: TypeError: Cannot merge incompatible container types
    line = _cli_error(capsys, ["train", f"--config={bad}"])
    assert line == (
        f"clipo-megatron train: error: {bad}: a recipe is a YAML mapping of keys "
        "(seed:, train:, clipo:, ...), not a list"
    )


def test_an_override_that_is_not_yaml_is_named(tmp_path, capsys):
    line = _cli_error(capsys, ["train", "train.lr=[1,", f"output.dir={tmp_path / 'o'}"])
    assert line == (
        "clipo-megatron train: error: override 'train.lr=[1,': malformed YAML "
        "(did not find expected node content)"
    )


@pytest.mark.parametrize("row", ["42", '"a question"', "[1, 2]", "null"])
def test_a_data_row_that_is_not_an_object_is_named_with_its_line(tmp_path, capsys, row):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(ROW) + "\n\n" + row + "\n")
    line = refused(
        capsys, lambda: train.main([f"data.path={data}", *QUIET, f"output.dir={tmp_path / 'o'}"])
    )
    assert f"data.path={data}: {data}:3: a row must be a JSON object" in line
    assert not (tmp_path / "o").exists()


def _big_question(tmp_path, chars: int):
    data = tmp_path / "big.jsonl"
    rows = [ROW, {"question": "x" * chars, "answer": "1"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def test_an_oversized_row_is_refused_before_the_model_loads(tmp_path, capsys, no_model):
    data = _big_question(tmp_path, 70_000)  # over the default 65,536 characters
    argv = [f"data.path={data}", "data.train_size=8", "rollout.prompts_per_step=2", *QUIET]
    line = refused(capsys, lambda: train.main([*argv, f"output.dir={tmp_path / 'o'}"]))
    size = len(json.dumps({"question": "x" * 70_000, "answer": "1"}))
    assert line.endswith(
        f"data.path={data}: {data}:2: a row of {size:,} characters, over "
        "data.max_row_chars=65,536; drop the row or raise data.max_row_chars"
    )
    with pytest.raises(ModelBuilt):  # the knob raised: read, then on to the model
        train.main([*argv, "data.max_row_chars=100000", f"output.dir={tmp_path / 'o'}"])


def test_the_cap_holds_for_the_eval_file_and_a_lowered_cap(tmp_path, capsys, no_model):
    data = _big_question(tmp_path, 2_000)
    argv = [f"eval.path={data}", "data.max_row_chars=1000", *QUIET, "eval.size=2"]
    line = refused(capsys, lambda: train.main([*argv, f"output.dir={tmp_path / 'o'}"]))
    assert f"eval.path={data}: {data}:2: a row of " in line and "data.max_row_chars=1,000" in line


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, capsys, no_model):
    data = tmp_path / "big.jsonl"
    with data.open("w") as f:  # 1.5 MB of ordinary rows
        for _ in range(1_500_000 // 60):
            f.write(json.dumps(ROW) + "\n")
    argv = [f"data.path={data}", "data.max_file_mb=1", *QUIET, f"output.dir={tmp_path / 'o'}"]
    line = refused(capsys, lambda: train.main(argv))
    mb = data.stat().st_size / 2**20
    assert line.endswith(
        f"data.path={data}: {data}: {mb:.1f} MB, over data.max_file_mb=1 MB; split the file or "
        "raise data.max_file_mb"
    )


def test_the_run_loads_its_data_before_its_model(tmp_path, monkeypatch):
    """`Run` reads the data first: a file over its caps stops it before the model is built
    (also for a caller that skipped the preflight, e.g. `compare`'s spawned arm)."""
    from clipo_megatron.runner.config import load_config
    from clipo_megatron.runner.run import Run

    def built(*a, **k):
        raise ModelBuilt

    monkeypatch.setattr("clipo_megatron.models.hf_policy.load_hf_policy", built)
    monkeypatch.setattr("clipo_megatron.runner.layout.Layout.init", built)
    data = _big_question(tmp_path, 5_000)
    cfg = load_config(None, [f"data.path={data}", "data.train_size=8", "data.max_row_chars=4000"])
    with pytest.raises(ValueError, match=r"big.jsonl:2: a row of .* over data.max_row_chars=4,000"):
        Run(cfg)


def test_read_rows_caps_json_arrays_and_parquet(tmp_path):
    pd = pytest.importorskip("pandas")
    caps = SizeCaps(max_row_chars=200)
    arr = tmp_path / "rows.json"
    arr.write_text(json.dumps([ROW, 7]))
    with pytest.raises(ValueError, match=r"rows.json item 2: a row must be a JSON object"):
        read_rows(arr)
    pq = tmp_path / "rows.parquet"
    pd.DataFrame({"question": ["a?", "b" * 300], "answer": ["1", "2"]}).to_parquet(pq)
    with pytest.raises(ValueError, match=r"rows.parquet row 2: a row of 3\d\d characters, over"):
        read_rows(pq, caps)
    assert len(read_rows(pq)) == 2  # the default cap
