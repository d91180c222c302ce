# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The preflight (`run_grpo_clipo.py --validate-only`): one test per check, with its message.

Failures 2, 5, 6 and 7 of issue 10 (found running NeMo-RL for real) each have a test here that
fails on the code / recipes before the preflight and passes after.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.guard import preflight as pf
from clipo_megatron.nemo_rl.guard.preflight_data import (
    check_files,
    check_overlap,
    split_beside_validation,
)
from clipo_megatron.nemo_rl.guard.preflight_parallel import (
    KNOWN_MODELS,
    check_parallel,
    min_sequence_multiple,
    model_shape,
)
from clipo_megatron.nemo_rl.guard.recipes import load_recipe
from clipo_megatron.nemo_rl.port import run_grpo

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "configs"
SHARED = ROOT.parent / "shared" / "data" / "clipo"
needs_shared = pytest.mark.skipif(
    not (SHARED / "train" / "gsm8k.parquet").is_file(), reason=f"needs the shared data at {SHARED}"
)


@pytest.fixture(autouse=True)
def _laptop(monkeypatch, tmp_path):
    """No NeMo-RL parent or checks, an empty HF cache: results depend on the test only."""
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)
    monkeypatch.setattr(Path, "home", lambda: tmp_path / "home")


def _parquet(path: Path, **columns) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def _verl(path: Path, problems: list[str]) -> Path:
    """A file in the authors' layout: `prompt` (one user message), `reward_model`."""
    return _parquet(
        path,
        prompt=[[{"role": "user", "content": p}] for p in problems],
        reward_model=[{"ground_truth": "1", "style": "rule"} for _ in problems],
    )


def _data(train: Path, val: Path | None, **train_extra) -> dict:
    default = {
        "dataset_name": "ResponseDataset",
        "input_key": "prompt",
        "output_key": "reward_model",
    }
    return {
        "train": {"data_path": str(train), **train_extra},
        "validation": None if val is None else {"data_path": str(val)},
        "default": default,
    }


# ----------------------------------------------------------------------------- failure 2


def test_failure2_nested_resolver_in_parent_recipe(tmp_path):
    """NeMo-RL's parent uses `${mul:${a}, ${b}}`; omegaconf 2.3's legacy resolver API rejects it
    (InterpolationResolutionError). Fails before the fix under omegaconf 2.3 (the pinned leg)."""
    (tmp_path / "parent.yaml").write_text(
        "policy:\n  seq: 2560\n  mb: 4\n  tokens: ${mul:${policy.seq}, ${policy.mb}}\n"
        "  most: ${max:${policy.mb}, 7}\n"
    )
    (tmp_path / "child.yaml").write_text("defaults: parent.yaml\npolicy:\n  mb: 2\n")
    cfg = load_recipe(tmp_path / "child.yaml")
    assert (cfg["policy"]["tokens"], cfg["policy"]["most"]) == (5120, 7)


def test_failure2_resolvers_coexist_with_nemo_rls():
    """NeMo-RL registers the same names with `register_new_resolver` behind `has_resolver`:
    whichever runs first, the other must not raise "resolver already registered"."""
    from omegaconf import OmegaConf

    from clipo_megatron.nemo_rl.guard.recipes import RESOLVERS, _register_resolvers

    _register_resolvers()
    for name in ("add", "mul", "div", "max"):  # NeMo-RL's register_omegaconf_resolvers, verbatim
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, RESOLVERS[name])
    _register_resolvers()
    assert OmegaConf.create({"a": "${mul:${b}, 3}", "b": 2}).a == 6


def test_failure2_interpolation_error_is_one_line(tmp_path):
    (tmp_path / "r.yaml").write_text("a: ${mul:${nope}, 2}\n")
    report = pf.preflight(tmp_path / "r.yaml", cluster_env=False)
    assert report.config is None and len(report.problems) == 1
    assert report.problems[0].startswith(f"--config {tmp_path / 'r.yaml'}: Interpolation")
    assert "\n" not in report.problems[0]


# ----------------------------------------------------------------------------- failure 5


def test_failure5_response_dataset_without_keys_is_caught(tmp_path):
    train = _verl(tmp_path / "train.parquet", ["a"])
    data = _data(train, None)
    del data["default"]["input_key"], data["default"]["output_key"]
    problems, _ = check_files(data)
    assert problems == [
        "data.train: ResponseDataset reads columns ['input', 'output'] (input_key / output_key) "
        "but train.parquet has ['prompt', 'reward_model']; set data.train.input_key / output_key "
        "(or data.default.*) to its columns, e.g. prompt / reward_model"
    ]
    assert check_files(_data(train, None)) == ([], [])


@needs_shared
def test_failure5_recipes_name_the_authors_columns(monkeypatch):
    """Before: no input_key / output_key, so NeMo-RL's ResponseDataset raised KeyError 'input'."""
    monkeypatch.setenv("CLIPO_DATA_DIR", str(SHARED))
    for recipe in ("track1_qwen3b.yaml", "track2_qwen7b.yaml"):
        data = load_recipe(CONFIGS / recipe)["data"]
        assert (data["default"]["input_key"], data["default"]["output_key"]) == (
            "prompt",
            "reward_model",
        )
        assert check_files(data) == ([], [])


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("nemo_rl") is None, reason="needs NeMo-RL importable"
)
@needs_shared
def test_failure5_real_response_dataset_row_feeds_our_processor(monkeypatch):
    from nemo_rl.data.datasets.response_datasets.response_dataset import ResponseDataset

    from clipo_megatron.nemo_rl.data import _problem_and_answer

    monkeypatch.setenv("CLIPO_DATA_DIR", str(SHARED))
    data = load_recipe(CONFIGS / "track2_qwen7b.yaml")["data"]
    keys = {k: data["default"][k] for k in ("input_key", "output_key")}
    row = ResponseDataset(data["train"]["data_path"], **keys).dataset[0]
    problem, answer = _problem_and_answer(row, None, None)
    assert problem.startswith("Let \\[f(x) = \\left\\{") and answer == "0"


def test_missing_data_file(tmp_path, monkeypatch):
    monkeypatch.delenv("CLIPO_DATA_DIR", raising=False)
    problems, _ = check_files(_data(tmp_path / "nope.parquet", None))
    assert problems == [
        f"data.train.data_path={str(tmp_path / 'nope.parquet')!r} does not exist "
        "(set CLIPO_DATA_DIR); point it at the parquet file"
    ]


def test_hub_dataset_and_unknown_class_are_warnings(tmp_path):
    data = {"train": {"dataset_name": "OpenMathInstruct-2"}, "validation": None}
    assert check_files(data) == ([], [])
    data = {
        "train": {
            "dataset_name": "my.Dataset",
            "data_path": str(_verl(tmp_path / "t.parquet", ["a"])),
        }
    }
    assert check_files(data) == ([], ["data.train.dataset_name=my.Dataset: columns not checked"])


# ----------------------------------------------------------------------------- failure 6


def test_failure6_split_validation_next_to_a_validation_file_is_a_warning(tmp_path):
    """NeMo-RL validates on the split-off rows and on data.validation on purpose (it trains on
    neither): a warning naming the key, never a refusal."""
    train = _verl(tmp_path / "train.parquet", ["a", "b"])
    val = _verl(tmp_path / "val.parquet", ["c"])
    assert check_overlap(_data(train, val, split_validation_size=0.05)) == []
    assert split_beside_validation(_data(train, val, split_validation_size=0.05)) == [
        "data.train.split_validation_size=0.05: NeMo-RL validates on that share of the training "
        "rows as well as on data.validation (not trained on); set "
        "data.train.split_validation_size=0 to validate on the held-out sets alone"
    ]
    assert split_beside_validation(_data(train, val, split_validation_size=0)) == []
    assert split_beside_validation(_data(train, None, split_validation_size=0.05)) == []
    assert check_overlap(_data(train, val, split_validation_size=0)) == []
    assert check_overlap(_data(train, None, split_validation_size=0.05)) == []
    assert check_overlap(_data(train, val, split_validation_size=None)) == [
        "data.train.split_validation_size is null; NeMo-RL's ResponseDataset compares it with 0 "
        "(TypeError); set it to 0"
    ]


def test_failure6_recipes_train_on_the_whole_file(tmp_path, monkeypatch):
    """NeMo-RL's parent sets data.train.split_validation_size 0.05; it survived the merge before."""
    base = tmp_path / "examples" / "configs"
    base.mkdir(parents=True)
    (base / "grpo_math_1B_megatron.yaml").write_text(
        "data:\n  train:\n    dataset_name: OpenMathInstruct-2\n    split_validation_size: 0.05\n"
    )
    monkeypatch.setenv("NEMO_RL_ROOT", str(tmp_path))
    for recipe in ("track1_qwen3b.yaml", "scaling/qwen32b_tp8_pp2.yaml"):
        data = load_recipe(CONFIGS / recipe)["data"]
        assert data["train"]["split_validation_size"] == 0
        assert data["train"]["dataset_name"] == "ResponseDataset"
        assert check_overlap(data) == []


def test_failure6_same_file_and_same_rows(tmp_path):
    train = _verl(tmp_path / "train.parquet", ["a", "b", "c"])
    assert check_overlap(_data(train, train)) == [
        f"data.validation.data_path is the training file {train}; validate on a held-out file"
    ]
    val = _verl(tmp_path / "val.parquet", ["b", "c", "d"])
    assert check_overlap(_data(train, val)) == [
        "data.validation: 2 rows of val.parquet have the same `prompt` as rows of data.train "
        "(train.parquet); remove them from one of the files"
    ]


@needs_shared
def test_failure6_shared_train_and_test_files_are_disjoint(monkeypatch):
    monkeypatch.setenv("CLIPO_DATA_DIR", str(SHARED))
    for recipe in ("track1_qwen3b.yaml", "track2_qwen7b.yaml"):
        assert check_overlap(load_recipe(CONFIGS / recipe)["data"]) == []


# ----------------------------------------------------------------------------- failure 7


def _qwen32b(*overrides):
    return load_recipe(CONFIGS / "scaling" / "qwen32b_tp8_pp2.yaml", list(overrides))


def test_failure7_qwen32b_pads_for_tp_sp_and_cp():
    """TP8 + SP + CP2 with packing: NeMo-RL asserts a multiple of 2*CP*TP = 32 (it inherited 8)."""
    cfg = _qwen32b()
    assert cfg["policy"]["make_sequence_length_divisible_by"] == 32
    assert check_parallel(cfg) == ([], [])
    problems, _ = check_parallel(_qwen32b("policy.make_sequence_length_divisible_by=8"))
    assert problems == [
        "policy.make_sequence_length_divisible_by=8 is not a multiple of 32 (NeMo-RL's packed "
        "path asserts a multiple of 2*CP when CP > 1, times TP under sequence parallel "
        "(models/megatron/data.py _get_pack_sequence_parameters_for_megatron); here TP=8, SP=on, "
        "CP=2); set policy.make_sequence_length_divisible_by=32"
    ]


@pytest.mark.parametrize(
    "tp,sp,cp,packed,need",
    [
        (8, True, 2, True, 32),
        (8, False, 2, True, 4),
        (8, True, 1, True, 8),
        (1, False, 4, True, 8),
        (2, True, 1, False, 2),
        (4, False, 1, False, 1),
        (1, True, 1, True, 1),
    ],
)
def test_min_sequence_multiple_is_nemo_rls_rule(tp, sp, cp, packed, need):
    cfg = {
        "policy": {
            "sequence_packing": {"enabled": packed},
            "megatron_cfg": {
                "tensor_model_parallel_size": tp,
                "sequence_parallel": sp,
                "context_parallel_size": cp,
            },
        }
    }
    assert min_sequence_multiple(cfg) == need


# ----------------------------------------------------------------------------- parallel sizes


def _track1(*overrides):
    return copy.deepcopy(load_recipe(CONFIGS / "track1_qwen3b.yaml", list(overrides)))


def test_attention_heads_and_query_groups_over_tp():
    problems, _ = check_parallel(
        _track1("policy.megatron_cfg.tensor_model_parallel_size=4", "cluster.gpus_per_node=8")
    )
    assert problems == [
        "policy.megatron_cfg.tensor_model_parallel_size=4: Qwen/Qwen2.5-3B-Instruct (built-in "
        "table) has 16 attention heads and 2 query groups, both must divide by TP; pick a TP "
        "dividing 2"
    ]


def test_layers_over_pp():
    problems, _ = check_parallel(_track1("policy.megatron_cfg.pipeline_model_parallel_size=8"))
    assert problems == [
        "policy.megatron_cfg.pipeline_model_parallel_size=8: Qwen/Qwen2.5-3B-Instruct (built-in "
        "table) has 36 layers, not divisible by PP; pick a PP dividing 36"
    ]


def test_vllm_tp_over_heads():
    problems, _ = check_parallel(_track1("policy.generation.vllm_cfg.tensor_parallel_size=3"))
    assert problems == [
        "policy.generation.vllm_cfg.tensor_parallel_size=3: vLLM needs Qwen/Qwen2.5-3B-Instruct "
        "(built-in table)'s 16 heads divisible by it and its 2 KV heads divisible by it (or it by "
        "them); pick a divisor of both"
    ]


def test_world_size_over_model_parallel():
    problems, _ = check_parallel(
        _track1(
            "policy.megatron_cfg.context_parallel_size=3",
            "policy.make_sequence_length_divisible_by=6",
        )
    )
    assert problems == [
        "cluster.num_nodes*gpus_per_node=8 GPUs: 8 training GPUs is not a multiple of "
        "TP*PP*CP=1*1*3=3; change cluster.num_nodes or the parallel sizes"
    ]


def test_global_batch_over_dp_and_micro_batch():
    problems, _ = check_parallel(_track1("policy.train_global_batch_size=4092"))
    assert problems == [
        "policy.train_global_batch_size=4092 is not a multiple of the data-parallel size 8 "
        "(8 GPUs / TP*PP*CP 1); NeMo-RL would drop the remainder; use a multiple of 8"
    ]
    unpacked = _track1("policy.sequence_packing.enabled=false", "policy.train_micro_batch_size=3")
    assert check_parallel(unpacked)[0] == [
        "policy.train_micro_batch_size=3 does not divide the per-rank batch 512 "
        "(train_global_batch_size 4096 / DP 8); pick a divisor"
    ]
    packed = _track1("policy.train_micro_batch_size=3")  # packing ignores the micro-batch size
    assert check_parallel(packed) == ([], [])


def test_head_embed_dim_over_tp():
    cfg = _track1(
        "clipo.head_tensor_parallel=true",
        "clipo.method.embed_dim=511",
        "policy.megatron_cfg.tensor_model_parallel_size=2",
    )
    cfg["data"] = {}
    assert pf.preflight_config(cfg, cluster_env=False).problems == [
        "clipo.method.embed_dim=511 is not divisible by tensor_model_parallel_size=2; pick a "
        "multiple of TP or set clipo.head_tensor_parallel=false (replicated head)"
    ]


@pytest.mark.parametrize(
    "override, line",
    [
        (
            "+loss_fn.force_on_policy_ratio=true",
            "loss_fn.force_on_policy_ratio=true makes NeMo-RL skip the prev-logprob pass (with "
            "grpo.seq_logprob_error_threshold unset), the pass CLIPO pools hidden states in, so "
            "the head gets nothing; set loss_fn.force_on_policy_ratio=false",
        ),
        (
            "+policy.megatron_cfg.cuda_graph_impl=transformer_engine",
            "policy.megatron_cfg.cuda_graph_impl='transformer_engine': a replayed CUDA graph runs "
            "no Python, so CLIPO's capture of the final-norm output is not guaranteed to run; set "
            "policy.megatron_cfg.cuda_graph_impl=none",
        ),
    ],
)
def test_issue6_features_clipo_cannot_capture_under(override, line):
    """Refused before any model loads, naming the key and the fix (issue item 6)."""
    cfg = _track1(override)
    cfg["data"] = {}
    assert pf.preflight_config(cfg, cluster_env=False).problems == [line]
    cfg["clipo"]["enabled"] = False  # the GRPO baseline arm captures nothing: allowed
    assert pf.preflight_config(cfg, cluster_env=False).problems == []


def test_model_shape_from_local_config_json_first(tmp_path, monkeypatch):
    snap = tmp_path / "hf" / "hub" / "models--Qwen--Qwen2.5-3B-Instruct" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 6,
                "num_attention_heads": 12,
                "num_key_value_heads": 3,
                "hidden_size": 768,
                "vocab_size": 1000,
            }
        )
    )
    shape = model_shape("Qwen/Qwen2.5-3B-Instruct")
    assert (shape.layers, shape.heads, shape.kv_heads, shape.source) == (
        6,
        12,
        3,
        str(snap / "config.json"),
    )
    local = tmp_path / "my-model"
    local.mkdir()
    (local / "config.json").write_text(
        json.dumps(
            {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "vocab_size": 10}
        )
    )
    assert (model_shape(str(local)).layers, model_shape(str(local)).kv_heads) == (2, 4)
    assert model_shape("Qwen/Qwen2.5-32B-Instruct") == KNOWN_MODELS["Qwen/Qwen2.5-32B-Instruct"]


def test_unknown_model_is_a_warning():
    _, warnings = check_parallel(_track1("policy.model_name=org/unknown"))
    assert warnings == [
        "policy.model_name='org/unknown': no local config.json and not in the built-in table; "
        "attention heads / layers vs TP / PP not checked"
    ]


def test_built_in_table_matches_the_published_configs():
    q32, llama = (
        KNOWN_MODELS["Qwen/Qwen2.5-32B-Instruct"],
        KNOWN_MODELS["meta-llama/Llama-3.1-70B-Instruct"],
    )
    assert (q32.layers, q32.heads, q32.kv_heads, q32.hidden, q32.vocab) == (64, 40, 8, 5120, 152064)
    assert (llama.layers, llama.heads, llama.kv_heads, llama.hidden, llama.vocab) == (
        80,
        64,
        8,
        8192,
        128256,
    )


# ----------------------------------------------------------------------------- NeMo-RL


def test_unsupported_nemo_rl_is_a_problem(monkeypatch):
    from clipo_megatron.nemo_rl.port import compat

    def unsupported(loop=None):
        raise compat.UnsupportedNemoRLError(
            "NeMo-RL 0.5.0 (MetricNormalizer absent) is not supported"
        )

    monkeypatch.setattr(compat, "check_supported", unsupported)
    assert pf.check_nemo_rl({}) == [
        "NeMo-RL: NeMo-RL 0.5.0 (MetricNormalizer absent) is not supported"
    ]


def test_master_config_errors_are_one_line_each():
    missing = {"loc": ("policy", "dtensor_cfg"), "type": "missing", "msg": "Field required"}
    wrong = {
        "loc": ("grpo", "num_prompts_per_step"),
        "type": "int_parsing",
        "input": "abc",
        "msg": "Input should be a valid integer",
    }
    assert run_grpo.pydantic_line(missing) == (
        "policy.dtensor_cfg is missing (NeMo-RL MasterConfig requires it); set it in the recipe "
        "or merge NeMo-RL's parent recipe (NEMO_RL_ROOT)"
    )
    assert run_grpo.pydantic_line(wrong) == (
        "grpo.num_prompts_per_step='abc': Input should be a valid integer (NeMo-RL MasterConfig); "
        "fix its value"
    )


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("nemo_rl") is None
    or not (
        Path(__import__("importlib").util.find_spec("nemo_rl").origin).parents[1]
        / "examples"
        / "configs"
    ).is_dir(),
    reason="needs a NeMo-RL checkout importable",
)
def test_real_master_config_rejects_a_bad_value():
    from clipo_megatron.nemo_rl.guard.recipes import nemo_rl_root

    assert nemo_rl_root() is not None
    cfg = _track1()
    assert pf.check_nemo_rl(cfg) == []
    cfg["grpo"]["num_prompts_per_step"] = "abc"
    assert pf.check_nemo_rl(cfg) == [
        "grpo.num_prompts_per_step='abc': Input should be a valid integer, unable to parse string "
        "as an integer (NeMo-RL MasterConfig); fix its value"
    ]


# ----------------------------------------------------------------------------- cluster env


def test_cluster_env(monkeypatch):
    cfg = _track1()
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.delenv("CLIPO_DATA_DIR", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    problems, warnings = pf.check_cluster_env(cfg, has_nemo_rl=False)
    assert problems == [
        "NeMo-RL is not importable: the run needs it; put its checkout on PYTHONPATH and set "
        "NEMO_RL_ROOT (or pass --no-cluster-env to check the recipe only)",
        "TORCH_CUDA_ARCH_LIST is not set: NeMo-RL's Megatron backend refuses to start without "
        "it; export TORCH_CUDA_ARCH_LIST='9.0' (H100; '9.0 10.0' for H100+B200)",
    ]
    assert [w.split(" ")[0] for w in warnings] == ["CLIPO_DATA_DIR", "HF_HOME"]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.setenv("CLIPO_DATA_DIR", "/data")
    monkeypatch.setenv("HF_HOME", "/hf")
    monkeypatch.setattr(pf, "nemo_rl_root", lambda: Path("/nemo_rl"))
    assert pf.check_cluster_env(cfg, has_nemo_rl=True) == ([], [])
    monkeypatch.setattr(pf, "nemo_rl_root", lambda: None)
    assert pf.check_cluster_env(cfg, has_nemo_rl=True)[0][0].startswith(
        "NEMO_RL_ROOT is unset and NeMo-RL has no examples/configs"
    )


def test_mtp_with_an_empty_last_pipeline_stage_leaves_the_head_nothing():
    """With MTP, Megatron-Core puts the final norm on the stage of the last decoder layer; CLIPO
    pools it on the last stage. An empty last stage is refused; one layer there is served."""
    mc = "policy.megatron_cfg."
    cfg = _track1(
        mc + "pipeline_model_parallel_size=2", "+" + mc + "mtp_num_layers=1",
        "+" + mc + "num_layers_in_last_pipeline_stage=0",
    )  # fmt: skip
    cfg["data"] = {}
    assert pf.preflight_config(cfg, cluster_env=False).problems == [
        f"{mc}num_layers_in_last_pipeline_stage=0 with {mc}mtp_num_layers=1: Megatron-Core then "
        "puts the final norm on the stage before the last, and CLIPO pools its output on the last "
        "stage (beside the head), so the head gets nothing; give the last pipeline stage at least "
        "one decoder layer"
    ]
    cfg["clipo"]["enabled"] = False  # the GRPO baseline arm captures nothing: allowed
    assert pf.preflight_config(cfg, cluster_env=False).problems == []
    cfg["clipo"]["enabled"] = True
    cfg["policy"]["megatron_cfg"]["num_layers_in_last_pipeline_stage"] = 1
    assert pf.preflight_config(cfg, cluster_env=False).problems == []


# ----------------------------------------------------------------------------- all together


def test_problems_are_collected_and_a_bad_value_does_not_stop_the_rest(tmp_path):
    data = _data(tmp_path / "nope.parquet", None)
    cfg = _track1(
        "grpo.num_generations_per_prompt=2",
        "policy.megatron_cfg.pipeline_model_parallel_size=5",
    )
    cfg["data"] = data
    problems = pf.preflight_config(cfg, cluster_env=False).problems
    assert [p.split("=")[0] for p in problems] == [
        "grpo.num_generations_per_prompt",
        "data.train.data_path",
        "policy.megatron_cfg.pipeline_model_parallel_size",
        "cluster.num_nodes*gpus_per_node",
    ]
    cfg = _track1("policy.train_global_batch_size=abc")
    cfg["data"] = {}
    assert pf.preflight_config(cfg, cluster_env=False).problems == [  # issue 31: the key named
        "policy.train_global_batch_size='abc' must be an int >= 1"
    ]


def test_cli_exit_code_2_one_line_per_problem_no_traceback(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "run_grpo_clipo.py"),
            "--config",
            str(CONFIGS / "scaling" / "qwen32b_tp8_pp2.yaml"),
            "--validate-only",
            "--no-cluster-env",
            "policy.make_sequence_length_divisible_by=8",
            "data.train.split_validation_size=0.05",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "CLIPO_DATA_DIR": str(tmp_path), "HOME": str(tmp_path)},
    )
    assert out.returncode == 2 and out.stdout == ""
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("  - ")]
    assert [ln.split("=")[0] for ln in lines] == [
        "  - data.train.data_path",
        "  - data.validation.data_path",
        "  - policy.make_sequence_length_divisible_by",
    ]
    assert "warning: data.train.split_validation_size=0.05: NeMo-RL validates" in out.stderr


def test_a_missing_nemo_rl_parent_is_one_line_naming_it(tmp_path, monkeypatch):
    """NEMO_RL_ROOT unset: a recipe that needs its `nemo_rl:` parent says so, naming the variable,
    the parent and the fix, before any key resolves (it said "Interpolation key
    'grpo.num_generations_per_prompt' not found", a key the parent would have set)."""
    from clipo_megatron.nemo_rl.guard import recipes

    if recipes.nemo_rl_root() is not None:  # an installed NeMo-RL with its configs: hide it
        monkeypatch.setattr(recipes, "nemo_rl_root", lambda: None)
    parent = "nemo_rl:examples/configs/recipes/llm/grpo-qwen3-30ba3b-8n8g-megatron.yaml"
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(f"defaults:\n  - {parent}\n  - clipo_megatron:clipo.yaml\n")
    line = (
        f"{recipe}: its `defaults:` parent {parent} was not found (NEMO_RL_ROOT is unset and no "
        "installed NeMo-RL has examples/configs), and the recipe does not set loss_fn, "
        "policy, data, env, logger, cluster, checkpointing itself; export "
        "NEMO_RL_ROOT=<your NeMo-RL checkout> (the folder holding examples/configs)"
    )
    assert pf.preflight(recipe, [], cluster_env=False).problems == [line]
    monkeypatch.setattr(recipes, "nemo_rl_root", lambda: tmp_path / "nemo-rl")  # a wrong root
    missing = tmp_path / "nemo-rl" / parent.split(":", 1)[1]
    assert pf.preflight(recipe, [], cluster_env=False).problems == [
        f"{recipe}: its `defaults:` parent {parent} is not in NeMo-RL's checkout at "
        f"{tmp_path / 'nemo-rl'} ({missing} does not exist); point NEMO_RL_ROOT at the NeMo-RL "
        "checkout (the folder holding examples/configs) or fix the parent's path"
    ]
    # a recipe that sets every section runs without the parent, as in CI (clipo_base.yaml)
    monkeypatch.setattr(recipes, "nemo_rl_root", lambda: None)
    assert pf.preflight(CONFIGS / "track1_qwen3b.yaml", [], cluster_env=False).config is not None
