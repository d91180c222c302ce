# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The eval CLI as a hostile user meets it: every bad input is one line, exit 2, before a model
loads, and nothing is written to `--out` (13 of 17 such inputs were tracebacks, some after a
36 s model load; a typo in `--model` wrote `run.json` and blocked the corrected rerun)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("omegaconf")
torch = pytest.importorskip("torch")

from clipo_megatron.eval.run import main  # noqa: E402


class ModelLoaded(Exception):
    """Raised where eval would load its model: a probe must never get there."""


@pytest.fixture
def no_model(monkeypatch):
    def boom(*a, **k):
        raise ModelLoaded

    monkeypatch.setattr("clipo_megatron.eval.generator.build_generator", boom)
    monkeypatch.setattr("clipo_megatron.runner.run.Run", boom)


@pytest.fixture
def data(tmp_path) -> Path:
    p = tmp_path / "gsm.jsonl"
    p.write_text(
        "".join(
            json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
            for i in range(4)
        )
    )
    return p


def _train_run(d: Path, *, trained_hidden: int = 64) -> Path:
    """A `train` output dir (config.json + checkpoint) whose checkpoint was trained with
    model.tiny_hidden=`trained_hidden` (64 is its own config's)."""
    from clipo_megatron.output_folder import claim_output_folder
    from clipo_megatron.runner.config import load_config, to_dict

    cfg = to_dict(load_config(None, ["model.source=tiny", f"output.dir={d}"]))
    claim_output_folder(d, kind="train", key="output.dir")
    (d / "checkpoints").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg))
    trained = json.loads(json.dumps(cfg))
    trained["model"]["tiny_hidden"] = trained_hidden
    state = {"format_version": 1, "step": 1, "config": trained, "policy": {}}
    torch.save(state, d / "checkpoints" / "latest.pt")
    return d


def _hf_folder(d: Path) -> Path:
    """A user's model folder: what must never be written into."""
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "llama"}')
    (d / "model.safetensors").write_bytes(b"weights")
    return d


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _refused(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("clipo-megatron eval"), lines[0]
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


def _base(data: Path, out: Path, model: str = "smollm2") -> list[str]:
    return ["--datasets", "gsm8k", "--source", f"gsm8k={data}", "--model", model, "--out", str(out)]


# (extra flags, what the line must say): each on top of a valid command.
FLAG_PROBES = [
    (["--limit", "-1"], "--limit -1: must be an integer in [1,"),
    (["--limit", "0"], "--limit 0: must be an integer in [1,"),
    (["--limit", "abc"], "argument --limit: invalid int value"),
    (["--verify-timeout", "-1"], "--verify-timeout -1.0: must be seconds per answer"),
    (["--verify-timeout", "nan"], "--verify-timeout nan: must be seconds per answer"),
    (["--verify-timeout", "inf"], "--verify-timeout inf: must be seconds per answer"),
    (["--n", "0"], "--n 0: must be an integer in [1, 1,024]"),
    (["--n", "100000"], "--n 100000: must be an integer in [1, 1,024]"),
    (["--max-tokens", "0"], "--max-tokens 0: must be an integer"),
    (["--chunk", "0"], "--chunk 0: must be an integer"),
    (["--verify-workers", "0"], "--verify-workers 0: must be an integer"),
    (["--threads", "-1"], "--threads -1: must be an integer"),
    (["--seed", "-1"], "--seed -1: must be an integer"),
    (["--temperature", "-1"], "temperature"),
    (["--top-p", "5"], "top_p"),
    (["--backend", "bogus"], "argument --backend: invalid choice"),
    (["--grader", "bogus"], "argument --grader: invalid choice"),
    (["--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("extra, said", FLAG_PROBES, ids=[" ".join(p[0]) for p in FLAG_PROBES])
def test_a_bad_flag_is_one_line_and_writes_nothing(extra, said, data, tmp_path, capsys, no_model):
    out = tmp_path / "out"
    line = _refused(capsys, [*_base(data, out), *extra])
    assert said in line, line
    assert not out.exists()


def test_a_missing_model_is_named(data, tmp_path, capsys, no_model):
    out = tmp_path / "out"
    argv = ["--datasets", "gsm8k", "--source", f"gsm8k={data}", "--out", str(out)]
    assert "--model is required" in _refused(capsys, argv)
    assert not out.exists()


def test_a_typo_in_model_writes_nothing_and_the_corrected_rerun_goes_on(
    data, tmp_path, capsys, no_model
):
    out = tmp_path / "out"
    line = _refused(capsys, _base(data, out, "smolm2"))
    assert "--model smolm2: no such model or folder" in line
    assert not out.exists()
    with pytest.raises(ModelLoaded):  # the corrected command gets to the model load
        main(_base(data, out, "smollm2"))


def test_a_folder_without_config_json_as_model(data, tmp_path, capsys, no_model):
    (tmp_path / "m").mkdir()
    assert "has no config.json" in _refused(
        capsys, _base(data, tmp_path / "o", str(tmp_path / "m"))
    )


def test_a_zero_byte_checkpoint_is_named(data, tmp_path, capsys, no_model):
    run = _train_run(tmp_path / "run")
    (run / "checkpoints" / "latest.pt").write_bytes(b"")
    line = _refused(capsys, _base(data, tmp_path / "out", str(run)))
    assert f"checkpoint {run / 'checkpoints' / 'latest.pt'} is unreadable (" in line
    assert not (tmp_path / "out").exists()


def test_another_models_checkpoint_is_named(data, tmp_path, capsys, no_model):
    run = _train_run(tmp_path / "run", trained_hidden=128)
    line = _refused(capsys, _base(data, tmp_path / "out", str(run)))
    assert "the checkpoint belongs to another run" in line


@pytest.mark.parametrize(
    "content, said",
    [
        (b'{"question": "caf\xe9?", "answer": "1"}\n', "gsm.jsonl:1: not UTF-8 text (byte 0xe9"),
        (b"not json\n", "gsm.jsonl line 1 is not JSON"),
        (b"7\n", "gsm.jsonl:1: a row must be a JSON object"),
        (b'{"question": "q", "answer": ""}\n', "every row's answer is empty"),
        (b"", "has no rows"),
    ],
    ids=["non-utf8", "not-json", "scalar-row", "all-answers-empty", "empty-file"],
)
def test_a_broken_data_file_is_named(content, said, tmp_path, capsys, no_model):
    bad = tmp_path / "gsm.jsonl"
    bad.write_bytes(content)
    line = _refused(capsys, _base(bad, tmp_path / "out"))
    assert said in line, line
    assert not (tmp_path / "out").exists()


def test_a_garbage_parquet_file_is_named(tmp_path, capsys, no_model):
    bad = tmp_path / "gsm.parquet"
    bad.write_bytes(b"PAR1 not really")
    line = _refused(capsys, _base(bad, tmp_path / "out"))
    assert f"{bad}: not a readable parquet file (" in line


def test_out_on_an_existing_file_is_refused(data, tmp_path, capsys, no_model):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    assert f"--out={f} is a file" in _refused(capsys, _base(data, f))
    assert f.read_text() == "mine"


@pytest.mark.parametrize("via_symlink", [False, True], ids=["folder", "symlink"])
def test_out_on_a_users_folder_is_refused_and_left_alone(
    via_symlink, data, tmp_path, capsys, no_model
):
    hf = _hf_folder(tmp_path / "my_model")
    before = _snapshot(hf)
    out = hf
    if via_symlink:
        out = tmp_path / "link"
        os.symlink(hf, out)
    line = _refused(capsys, _base(data, out))
    assert "already holds files (config.json, model.safetensors)" in line
    assert "not an output of clipo-megatron" in line
    assert _snapshot(hf) == before


def test_out_on_a_train_run_is_refused(data, tmp_path, capsys, no_model):
    run = _train_run(tmp_path / "run")
    before = _snapshot(run)
    assert "a `clipo-megatron train` run" in _refused(capsys, _base(data, run))
    assert _snapshot(run) == before


@pytest.mark.parametrize(
    "datasets, said",
    [("", "name at least one dataset"), (",", "name at least one dataset"), ("nosuch", "nosuch")],
)
def test_bad_dataset_names(datasets, said, tmp_path, capsys, no_model):
    argv = ["--datasets", datasets, "--model", "smollm2", "--out", str(tmp_path / "o")]
    assert said in _refused(capsys, argv)


def test_a_source_without_a_name(tmp_path, capsys, no_model):
    argv = ["--datasets", "gsm8k", "--source", "x.jsonl", "--model", "smollm2"]
    assert "expected NAME=SOURCE" in _refused(capsys, argv)


def test_help_lists_every_suite(capsys):
    from clipo_megatron.eval.suites import SUITES

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    option = text[text.index("\n  --suite") :].split("--datasets")[0]  # the option's own help
    assert "track1_greedy" in SUITES and all(name in option for name in SUITES), option


# `eval --run` / `--config` (runner/heldout.py, reached through the `clipo-megatron` CLI).


def _heldout(capsys, argv: list[str]) -> str:
    from clipo_megatron.cli import main as cli_main

    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli_main(["eval", *argv])
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_eval_run_of_a_missing_folder_says_so(tmp_path, capsys, no_model):
    line = _heldout(capsys, ["--run", str(tmp_path / "nope")])
    assert f"--run {tmp_path / 'nope'}: no such folder" in line


def test_eval_run_with_another_models_checkpoint(tmp_path, capsys, no_model):
    run = _train_run(tmp_path / "run", trained_hidden=128)
    before = _snapshot(run)
    line = _heldout(capsys, ["--run", str(run)])
    assert "belongs to another model" in line and "model.tiny_hidden 128" in line
    assert _snapshot(run) == before  # nothing written into the run (no eval_config.yaml)


def test_eval_run_out_on_a_users_folder(tmp_path, capsys, no_model):
    run = _train_run(tmp_path / "run")
    hf = _hf_folder(tmp_path / "my_model")
    line = _heldout(capsys, ["--run", str(run), "--out", str(hf)])
    assert "not an output of clipo-megatron" in line


def test_eval_compare_out_on_a_users_folder_and_a_broken_results_file(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "results.json").write_text('{"scores": {"gsm8k": 1.0}, "averages": {}}')
    hf = _hf_folder(tmp_path / "my_model")
    line = _refused(capsys, ["compare", str(a), str(b), "--out", str(hf)])
    assert "not an output of clipo-megatron" in line
    (b / "results.json").write_text("{torn")
    line = _refused(capsys, ["compare", str(a), str(b), "--out", str(tmp_path / "cmp")])
    assert f"{b / 'results.json'}: not the results.json of `clipo-megatron eval`" in line
    assert not (tmp_path / "cmp").exists()
