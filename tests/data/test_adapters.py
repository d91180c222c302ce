# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every adapter on small fixtures made here: verl parquet, flat jsonl/parquet, hub (fake), generator."""

import json
import sys
import types

import pytest

from clipo_megatron.data import Record, load_dataset, subset
from clipo_megatron.data.files import clean_answer
from clipo_megatron.data.templates import COMMONSENSEQA, MATH, MMLU, TRUTHFULQA

pd = pytest.importorskip("pandas")


def _verl_rows(name, questions, answers, instruction):
    return [
        {
            "data_source": f"conrl/{name}",
            "prompt": [{"role": "user", "content": f"{q}\n{instruction}"}],
            "ability": "math",
            "reward_model": {"ground_truth": a, "style": "rule"},
            "extra_info": {"index": i, "split": "test"},
        }
        for i, (q, a) in enumerate(zip(questions, answers))
    ]


@pytest.fixture
def verl_dir(tmp_path):
    """A data dir in the authors' layout: test/gsm8k.parquet, test/mmlu2k.parquet, train/math75.parquet."""
    (tmp_path / "test").mkdir()
    (tmp_path / "train").mkdir()
    pd.DataFrame(_verl_rows("gsm8k", ["1+1?", "2+2?", "3+3?"], ["2", "4", "6"], MATH)).to_parquet(
        tmp_path / "test" / "gsm8k.parquet"
    )
    pd.DataFrame(_verl_rows("mmlu2k", ["Q?\n\nOptions:\nA. x\nB. y"], ["B"], MMLU)).to_parquet(
        tmp_path / "test" / "mmlu2k.parquet"
    )
    pd.DataFrame(
        _verl_rows("math75", ["x?"], ["So $x=\\frac{1}{2}$, i.e. \\boxed{\\frac{1}{2}}."], MATH)
    ).to_parquet(tmp_path / "train" / "math75.parquet")
    return tmp_path


def test_verl_parquet(verl_dir):
    recs = load_dataset("gsm8k", data_dir=verl_dir)
    assert recs[1] == Record(f"2+2?\n{MATH}", "4", "math", "conrl/gsm8k", 1, "gsm8k")
    (mc,) = load_dataset("mmlu2k", data_dir=verl_dir)
    assert (mc.kind, mc.ground_truth, mc.prompt.count("Let's think")) == ("mc", "B", 1)
    assert mc.messages == [{"role": "user", "content": mc.prompt}]
    (m,) = load_dataset("math_train", data_dir=verl_dir)
    assert m.ground_truth == "\\frac{1}{2}"  # a full solution -> its last box
    assert (
        load_dataset("gsm8k", source=str(verl_dir / "test" / "gsm8k.parquet"))[0].ground_truth
        == "2"
    )


def test_data_dir_from_env(verl_dir, monkeypatch):
    monkeypatch.setenv("CLIPO_DATA_DIR", str(verl_dir))
    assert len(load_dataset("gsm8k")) == 3


def test_flat_jsonl_math_and_mc(tmp_path):
    p = tmp_path / "g.jsonl"
    p.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"question": "Janet has 3 eggs...", "answer": "She has 3*6=18.\n#### 1,018"},
                {"problem": "Find x.", "solution": "Thus \\boxed{\\sqrt{2}}."},
            ]
        )
        + "\n\n"
    )
    a, b = load_dataset("gsm8k", source=str(p))
    assert (a.prompt, a.ground_truth, a.index) == (f"Janet has 3 eggs...\n{MATH}", "1018", 0)
    assert (b.ground_truth, b.data_source) == ("\\sqrt{2}", str(p))
    q = tmp_path / "c.jsonl"
    q.write_text(
        json.dumps(
            {
                "question": "Where?",
                "choices": {"label": ["A", "B"], "text": ["bank", "mall"]},
                "answerKey": "B",
            }
        )
        + "\n"
        + json.dumps({"question": "Which?", "choices": ["u", "v", "w"], "answer": 2})
        + "\n"
    )
    c, d = load_dataset("commonsense_qa", source=str(q))
    assert (
        c.prompt == f"Where?\n\nOptions:\nA. bank\nB. mall\n{COMMONSENSEQA}"
        and c.ground_truth == "B"
    )
    assert d.ground_truth == "C"  # an integer answer is an option index


def test_flat_parquet(tmp_path):
    p = tmp_path / "x.parquet"
    pd.DataFrame({"question": ["a?", "b?"], "answer": ["1", "2"]}).to_parquet(p)
    assert [r.ground_truth for r in load_dataset("aime24", source=str(p))] == ["1", "2"]


def test_bad_rows_and_files_are_clear_errors(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"text": "no question"}) + "\n")
    with pytest.raises(ValueError, match="line 1: needs a question"):
        load_dataset("gsm8k", source=str(p))
    p.write_text("{not json\n")
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        load_dataset("gsm8k", source=str(p))
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported file type '.csv'"):
        load_dataset("gsm8k", source=str(tmp_path / "x.csv"))


def test_missing_dataset_names_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("CLIPO_DATA_DIR", raising=False)
    with pytest.raises(
        FileNotFoundError, match=r"gsm8k: no source given.*test/gsm8k.parquet.*--source gsm8k=hf"
    ):
        load_dataset("gsm8k")
    with pytest.raises(FileNotFoundError, match=r"aime24: .* has none of test/aime.parquet"):
        load_dataset("aime", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset("gsm8k", source=str(tmp_path / "nope.jsonl"))
    with pytest.raises(FileNotFoundError, match="no Hugging Face hub copy of 'math_perturb_hard'"):
        load_dataset("math_perturb_hard", source="hf")
    with pytest.raises(FileNotFoundError, match="'mmlu' has no offline generator"):
        load_dataset("mmlu", source="gym", limit=2)


class _FakeDatasets(types.ModuleType):
    """Stands in for `datasets`: records the request, returns canned rows (nothing is downloaded)."""

    def __init__(self, rows, fail=None):
        super().__init__("datasets")
        self.rows, self.fail, self.calls = rows, fail, []

    def load_dataset(self, repo, config, split):
        self.calls.append((repo, config, split))
        if self.fail:
            raise self.fail
        return self.rows


def test_hub_layouts(monkeypatch):
    fake = _FakeDatasets([{"question": "1+1?", "answer": "so\n#### 2"}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    (r,) = load_dataset("gsm8k", source="hf")
    assert fake.calls == [("openai/gsm8k", "main", "test")]
    assert (r.ground_truth, r.data_source, r.prompt) == ("2", "hf:openai/gsm8k", f"1+1?\n{MATH}")

    fake.rows = [{"question": "Q?", "choices": ["a", "b", "c", "d"], "answer": 3, "subject": "x"}]
    (r,) = load_dataset("mmlu", source="hf")
    assert r.ground_truth == "D" and r.prompt == f"Q?\n\nOptions:\nA. a\nB. b\nC. c\nD. d\n{MMLU}"

    fake.rows = [
        {"question": "T?", "mc1_targets": {"choices": ["right", "w1", "w2"], "labels": [1, 0, 0]}}
    ]
    (r,) = load_dataset("truthfulqa", source="hf")
    letter_line = next(x for x in r.prompt.splitlines() if x.endswith(". right"))
    assert letter_line[0] == r.ground_truth and r.prompt.endswith(TRUTHFULQA)

    fake.rows = [
        {"Question": "Q1", "Answer": "True", "Picture": None},
        {"Question": "Q2", "Answer": "3", "Picture": object()},
    ]
    recs = load_dataset("theoremqa", source="hf")
    assert [(r.ground_truth, r.index) for r in recs] == [
        ("True", 0)
    ]  # questions with a picture dropped

    fake.rows = [{"problem": "p", "answer": "7"}]
    load_dataset("aime25", source="hf:me/aime-copy:cfg@validation")
    assert fake.calls[-1] == ("me/aime-copy", "cfg", "validation")


def test_hub_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", _FakeDatasets([], fail=ConnectionError("offline")))
    with pytest.raises(
        FileNotFoundError, match=r"could not load openai/gsm8k .*ConnectionError: offline.*--source"
    ):
        load_dataset("gsm8k", source="hf")


@pytest.mark.runner
def test_gym_generator_is_seeded():
    pytest.importorskip("reasoning_gym")
    a = load_dataset("gsm_symbolic", source="gym", limit=4, gen_seed=3)
    b = load_dataset("gsm_symbolic", source="gym", limit=4, gen_seed=3)
    assert (
        a == b
        and len(a) == 4
        and all(r.prompt.endswith(MATH) and r.ground_truth.isdigit() for r in a)
    )
    assert load_dataset("gsm_symbolic", source="gym", limit=4, gen_seed=4) != a
    (r,) = load_dataset("basic_arithmetic", source="gym", limit=1)
    assert r.data_source == "gym:basic_arithmetic" and r.kind == "math"
    with pytest.raises(ValueError, match="size >= 1"):
        load_dataset("gsm_symbolic", source="gym")


def test_subset_is_fixed_and_in_order():
    recs = [Record(str(i), str(i), "math", "s", i) for i in range(10)]
    s = subset(recs, 4, seed=0)
    assert [r.index for r in s] == sorted(r.index for r in s) and len(s) == 4
    assert subset(recs, 4, seed=0) == s and subset(recs, None) == recs and subset(recs, 50) == recs


@pytest.mark.parametrize(
    "raw, gt",
    [
        ("x\n#### 1,234", "1234"),
        ("\\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),
        (" 7 ", "7"),
        (42, "42"),
    ],
)
def test_clean_answer(raw, gt):
    assert clean_answer(raw) == gt
