# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`train`'s late failures moved before the model load (issue 31, item 5): data that cannot fill
one step (a 28-line rank-0 traceback after the model load and the first evaluation, with
files left behind), an empty answer (accepted silently), a model change with
`--allow-config-change` (a 37-line traceback) and a `--config` that is not YAML (the whole file
echoed into the error)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.cli import main as cli_main  # noqa: E402
from clipo_megatron.runner import train  # noqa: E402

from .faults import QUIET, ModelBuilt, refused  # noqa: E402
from .test_faults_resume import _trained  # noqa: E402


def _rows(path, answers: list[str]):
    path.write_text(
        "".join(
            json.dumps({"question": f"What is {i} + 1?", "answer": a}) + "\n"
            for i, a in enumerate(answers)
        )
    )
    return path


def test_data_that_cannot_fill_one_step_is_refused_before_the_model_loads(
    tmp_path, capsys, no_model
):
    data, out = _rows(tmp_path / "d.jsonl", ["1", "2", "3"]), tmp_path / "run"
    argv = [*QUIET, f"output.dir={out}", f"data.path={data}", "rollout.prompts_per_step=8"]
    line = refused(capsys, lambda: train.main(argv))
    assert line == (
        f"clipo-megatron train: error: data.path={data}: rollout.prompts_per_step=8 but the task "
        "has 3 distinct prompts: lower rollout.prompts_per_step or add rows to the file"
    )
    assert not out.exists()  # no config.json, metrics.jsonl or eval_before.json left behind


def test_empty_answers_are_counted_in_one_line(tmp_path, capsys, no_model):
    data = _rows(tmp_path / "d.jsonl", ["1", "", "3", "  ", *[str(i) for i in range(5, 13)]])
    argv = [*QUIET, f"output.dir={tmp_path / 'run'}", f"data.path={data}"]
    with pytest.raises(ModelBuilt):
        train.main(argv)
    err = capsys.readouterr().err
    assert (
        f"{data}: 2 row(s) with an empty answer (line 2, line 4): every response to them scores 0"
    ) in err


def test_only_empty_answers_are_refused(tmp_path, capsys, no_model):
    data = _rows(tmp_path / "d.jsonl", ["", " "])
    line = refused(capsys, lambda: train.main([*QUIET, f"data.path={data}"]))
    assert f"data.path={data}: {data}: every row's answer is empty" in line


@pytest.mark.parametrize("flag", [[], ["--allow-config-change"]], ids=["plain", "flag"])
def test_a_model_change_is_refused_even_with_the_flag(tmp_path, capsys, no_model, flag):
    out = tmp_path / "run"
    argv = _trained(out, "model.source=tiny")
    config_before = (out / "config.json").read_bytes()
    line = refused(capsys, lambda: train.main([*flag, *argv, "model.tiny_hidden=128"]))
    assert f"output.dir={out} holds a checkpoint (step 3) of another model: " in line
    assert "model.tiny_hidden (64 -> 128)" in line
    assert "a model cannot change on resume, even with --allow-config-change" in line
    assert (out / "config.json").read_bytes() == config_before


SCRIPT = "#!/bin/bash\necho secret-token-123\nfor x in a b; do echo $x; done\n"
NOTES = "My notes about secret-token-123, a first line so long that it goes on and on: yes\n"


@pytest.mark.parametrize(
    "content, said",
    [
        (SCRIPT.encode(), "a recipe is a YAML mapping of keys (seed:, train:, clipo:, ...), not"),
        (NOTES.encode(), "a first line so long that i... (76 characters)' not in 'RunConfig'"),
        (b"\xff\xfe\x00binary", "not a YAML recipe (not UTF-8 text: byte 0xff at offset 0)"),
    ],
    ids=["shell-script", "notes", "binary"],
)
def test_config_that_is_not_yaml_never_echoes_the_file(tmp_path, capsys, content, said):
    f = tmp_path / "recipe.txt"
    f.write_bytes(content)
    with pytest.raises(SystemExit) as e:
        rc = cli_main(["train", "--config", str(f)])
        raise SystemExit(rc)
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert said in lines[0], lines[0]
    assert "for x in a b" not in lines[0] and "goes on and on" not in lines[0]


def test_a_file_saved_with_a_bom_and_crlf_trains_like_the_clean_one(tmp_path, capsys, no_model):
    data = _rows(tmp_path / "d.jsonl", [str(i) for i in range(12)])  # issue 51: "not JSON"
    data.write_bytes(b"\xef\xbb\xbf" + data.read_bytes().replace(b"\n", b"\r\n"))
    with pytest.raises(ModelBuilt):  # every input check passed; the model load is next
        train.main([*QUIET, f"output.dir={tmp_path / 'run'}", f"data.path={data}"])


def test_a_null_answer_is_named_by_its_line(tmp_path, capsys, no_model):
    data = _rows(tmp_path / "d.jsonl", [str(i) for i in range(12)])
    rows = data.read_text().splitlines()
    rows[2] = json.dumps({"question": "What is 2 + 1?", "answer": None})
    data.write_text("\n".join(rows) + "\n")
    with pytest.raises(ModelBuilt):
        train.main([*QUIET, f"output.dir={tmp_path / 'run'}", f"data.path={data}"])
    err = capsys.readouterr().err
    assert f"{data}: 1 row(s) with an empty answer (line 3): every response" in err
