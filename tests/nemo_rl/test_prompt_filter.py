# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo.drop_overlong_prompts`: verl's filter_overlong_prompts, counted by the preflight.

verl keeps a prompt whose chat-template token count is at most `max_prompt_length`; NeMo-RL's
processors keep every row and mask the over-long ones. Lengths here come from the stand-in
tokenizer of test_data.py (one token per character of "<u>" + content + "<a>"), so every count
is the characters of a hand-built prompt.
"""

from __future__ import annotations

import types

import pytest

from clipo_megatron.nemo_rl import prompt_filter as pfl
from clipo_megatron.nemo_rl.data import MATH_INSTRUCTION, PROCESSORS
from clipo_megatron.nemo_rl.guard import prompt_count
from tests.nemo_rl.test_data import _Tok

WRAP = len("<u>") + len("<a>")


def _row(k: int) -> dict:
    """An authors' parquet row whose prompt is k x's, a newline and the instruction."""
    content = "x" * k + "\n" + MATH_INSTRUCTION
    return {"prompt": [{"role": "user", "content": content}], "reward_model": {"ground_truth": "1"}}


def _length(k: int) -> int:
    return WRAP + k + 1 + len(MATH_INSTRUCTION)


def test_verl_keeps_prompts_up_to_the_limit():
    assert pfl.kept([3, 5, 6, 5], 5) == [0, 1, 3]
    assert pfl.PromptCount(2, 4, 512).line() == "dropped 2 of 4 prompts over 512 tokens"


def test_the_processor_masks_only_prompts_over_the_limit():
    """A prompt of exactly the limit fits (verl keeps it): trained on, not masked."""
    n = _length(10)
    at = PROCESSORS["clipo_math"](_row(10), None, _Tok(), n, 0)
    over = PROCESSORS["clipo_math"](_row(10), None, _Tok(), n - 1, 0)
    assert at["length"] == n and at["loss_multiplier"] == 1.0
    assert over["loss_multiplier"] == 0.0 and over["message_log"][0]["token_ids"].numel() == 4


class _Rows(list):
    def select(self, keep):
        return _Rows(self[i] for i in keep)


class _Processed:
    """NeMo-RL's AllTaskProcessedDataset as the filter uses it: `.dataset`, len, processed rows."""

    def __init__(self, lengths):
        self.dataset = _Rows(lengths)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        return {"length": self.dataset[i]}


def test_drop_from_dataset_keeps_the_rows_verl_keeps():
    ds = _Processed([510, 513, 512, 600])
    assert pfl.drop_from_dataset(ds, 512) == pfl.PromptCount(2, 4, 512)
    assert list(ds.dataset) == [510, 512]


def test_rows_without_select_are_subset():
    """NeMo-RL merges mixed sources into a `ConcatDataset`, which has no `select`."""

    class Plain(list):  # indexable, no select
        pass

    ds = _Processed([])
    ds.dataset = Plain([510, 513, 512])
    assert pfl.drop_from_dataset(ds, 512) == pfl.PromptCount(1, 3, 512)
    assert len(ds) == 2 and [ds[i]["length"] for i in range(2)] == [510, 512]


class _NoBosTok(_Tok):
    """The stand-in as NeMo-RL's double-BOS check reads a processor: a wrapped tokenizer."""

    tokenizer = types.SimpleNamespace(bos_token_id=None)


@pytest.mark.nemo_rl
def test_nemo_rls_processed_dataset_is_filtered_in_place():
    """On NeMo-RL's own AllTaskProcessedDataset over an HF Dataset and over its ConcatDataset
    (needs NeMo-RL importable: NEMO_RL_SRC on PYTHONPATH, scripts/test_nemo_rl.sh)."""
    try:
        from datasets import Dataset
        from nemo_rl.data.datasets.processed_dataset import AllTaskProcessedDataset
        from nemo_rl.data.datasets.utils import merge_datasets
        from nemo_rl.data.interfaces import TaskDataSpec
    except ImportError as e:
        pytest.skip(
            f"NeMo-RL does not import here ({e}); set NEMO_RL_SRC (scripts/test_nemo_rl.sh)"
        )
    ks = [10, 40, 20, 30]
    rows = [{**_row(k), "task_name": "math"} for k in ks]
    procs = {"math": (TaskDataSpec(task_name="math"), PROCESSORS["clipo_math"])}
    limit = _length(20)
    for data in (Dataset.from_list(rows), merge_datasets([Dataset.from_list(rows), rows[:1]])):
        ds = AllTaskProcessedDataset(data, _NoBosTok(), None, procs, max_seq_length=limit)
        n = len(ds)
        count = pfl.drop_from_dataset(ds, limit)
        left = [ds[i] for i in range(len(ds))]
        assert count.dropped == 2 and count.total == n
        assert all(d["length"] <= limit and d["loss_multiplier"] == 1.0 for d in left)


def test_the_driver_filters_training_and_validation(capsys):
    from clipo_megatron.nemo_rl.driver import drop_overlong_prompts

    train, val = {"math": _Processed([1, 9, 3])}, _Processed([9, 9])
    drop_overlong_prompts(train, val, 4)
    assert list(train["math"].dataset) == [1, 3] and list(val.dataset) == []
    assert capsys.readouterr().out.splitlines() == [
        "  clipo.drop_overlong_prompts: training: dropped 1 of 3 prompts over 4 tokens",
        "  clipo.drop_overlong_prompts: validation: dropped 2 of 2 prompts over 4 tokens",
    ]


def _config(tmp_path, ks, limit):
    import pandas as pd

    path = tmp_path / "train.parquet"
    pd.DataFrame([_row(k) for k in ks]).to_parquet(path)
    return {
        "data": {
            "max_input_seq_length": limit,
            "train": {"data_path": str(path), "processor": "clipo_math"},
        },
        "policy": {"tokenizer": {"name": "Qwen/Qwen2.5-7B-Instruct"}},
    }


def test_the_preflight_counts_with_the_runs_tokenizer(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(prompt_count, "load_tokenizer", lambda name: asked.append(name) or _Tok())
    config = _config(tmp_path, [10, 20, 30, 40], _length(20))
    assert (
        prompt_count.preflight_line(config) == f"dropped 2 of 4 prompts over {_length(20)} tokens"
    )
    assert asked == ["Qwen/Qwen2.5-7B-Instruct"]


def test_without_the_tokenizer_the_preflight_says_so(tmp_path, monkeypatch):
    def missing(name):
        raise OSError(f"{name} not in the cache")

    monkeypatch.setattr(prompt_count, "load_tokenizer", missing)
    line = prompt_count.preflight_line(_config(tmp_path, [10], 512))
    assert line.startswith("prompts over 512 tokens are dropped at the start of the run; ")
    assert "not counted here: tokenizer 'Qwen/Qwen2.5-7B-Instruct' is not available" in line


def test_data_it_cannot_read_is_left_to_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(prompt_count, "load_tokenizer", lambda name: _Tok())
    config = _config(tmp_path, [10], 512)
    config["data"]["train"] = {"data_path": "openai/gsm8k", "processor": "clipo_gsm8k"}
    assert prompt_count.preflight_line(config) == (
        "prompts over 512 tokens are dropped at the start of the run; not counted here: "
        "data.train is not a local parquet file with a clipo_* processor"
    )


def test_the_ok_line_carries_the_count():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "run_grpo_clipo", root / "examples/run_grpo_clipo.py"
    )
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    line = cli.ok_line(Path("r.yaml"), 0, None, "dropped 75 of 7500 prompts over 512 tokens")
    assert line == (
        "preflight OK: r.yaml; dropped 75 of 7500 prompts over 512 tokens; "
        "resolved config --verbose prints it, --print-config FILE saves it"
    )


def test_the_switch_is_a_boolean():
    from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig

    assert ClipoNemoRLConfig.from_dict({}).drop_overlong_prompts is False
    with pytest.raises(ValueError, match="clipo.drop_overlong_prompts='yes' must be true or false"):
        ClipoNemoRLConfig.from_dict({"drop_overlong_prompts": "yes"})
