# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Recipes load (defaults chain, interpolation, overrides) and validate; clashes raise with the fix."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig, validate_master_config
from clipo_megatron.nemo_rl.guard.recipes import load_recipe
from clipo_megatron.paper.recipes import recipe_settings

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "configs"
RECIPES = sorted(
    p
    for p in CONFIGS.rglob("*.yaml")
    if p.name != "cpu_demo.yaml" and p.parent.name != "objectives"
)


@pytest.fixture(autouse=True)
def _no_nemo_rl_root(monkeypatch):
    monkeypatch.delenv("NEMO_RL_ROOT", raising=False)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_recipe_loads_and_validates(path):
    cfg = load_recipe(path)
    clipo = validate_master_config(cfg)
    assert cfg["policy"]["megatron_cfg"]["enabled"] is True
    assert cfg["policy"]["megatron_cfg"]["optimizer"]["lr"] == 1e-6
    tau, lam = 0.05, 0.2  # the paper's head table; a paper row's recipe: its row's settings
    if path.parent.name == "reproduce":
        row = recipe_settings()[path.stem]
        tau, lam = row.tau, (1.0 if row.loss == "softnn" else 0.2)
    assert clipo.method.temperature == tau and clipo.method.lam == lam
    assert clipo.method.head_lr == 1e-3 and clipo.method.head_weight_decay == 0.01


def test_track_settings_match_the_paper():
    t1 = load_recipe(CONFIGS / "track1_qwen3b.yaml")
    c1 = validate_master_config(t1)
    assert t1["policy"]["model_name"] == "Qwen/Qwen2.5-3B-Instruct"
    assert (t1["grpo"]["num_prompts_per_step"], t1["grpo"]["num_generations_per_prompt"]) == (
        512,
        16,
    )
    assert t1["policy"]["generation"]["max_new_tokens"] == 2048
    assert t1["policy"]["max_total_sequence_length"] == 512 + 2048
    assert (c1.method.embed_dim, c1.method.warmup_steps, c1.method.max_group_size) == (512, 14, 16)
    assert t1["policy"]["sequence_packing"]["logprob_mb_tokens"] == 2560 * 4  # ${mul:...} resolved
    assert t1["data"]["train"]["data_path"].endswith("train/gsm8k.parquet")
    t2 = load_recipe(CONFIGS / "track2_qwen7b.yaml")
    c2 = validate_master_config(t2)
    assert t2["policy"]["model_name"] == "Qwen/Qwen2.5-7B-Instruct"
    assert (t2["grpo"]["num_prompts_per_step"], t2["policy"]["generation"]["max_new_tokens"]) == (
        128,
        4096,
    )
    assert (c2.method.embed_dim, c2.method.warmup_steps) == (2048, 58)
    assert t2["data"]["train"]["data_path"].endswith("train/math75.parquet")


@pytest.mark.parametrize(
    "objective,expect",
    [
        (
            "dapo",
            {
                "ratio_clip_min": 0.2,
                "ratio_clip_max": 0.28,
                "reference_policy_kl_penalty": 0.0,
                "ratio_clip_c": 3.0,  # the authors' verl dual clip
                "kl_gradient": "kl",
            },
        ),
        (
            "gspo",
            {
                "ratio_clip_min": 3e-4,
                "ratio_clip_max": 4e-4,
                "sequence_level_importance_ratios": True,
                "token_level_loss": False,
                "ratio_clip_c": None,
            },
        ),
        (
            "gmpo",
            {
                "ratio_clip_min": 0.4,
                "ratio_clip_max": 0.4,
                "token_level_loss": False,  # GMPO's mean over sequences (verl geo_mean)
                "ratio_clip_c": None,
            },
        ),
    ],
)
def test_objective_variants(objective, expect):
    from clipo_megatron.nemo_rl.loss_functions import policy_loss_config

    cfg = load_recipe(CONFIGS / f"track1_qwen3b_{objective}.yaml")
    assert validate_master_config(cfg).objective == objective
    for k, v in expect.items():
        assert cfg["loss_fn"][k] == v, k
        assert policy_loss_config(objective)[k] == v, k
    assert cfg["grpo"]["use_dynamic_sampling"] is (objective == "dapo")
    assert (
        cfg["policy"]["model_name"] == "Qwen/Qwen2.5-3B-Instruct"
    )  # the track survives the mix-in


def test_scaling_recipes_shard_the_head():
    cfg = load_recipe(CONFIGS / "scaling" / "qwen32b_tp8_pp2.yaml")
    clipo = validate_master_config(cfg)
    m = cfg["policy"]["megatron_cfg"]
    assert (
        m["tensor_model_parallel_size"],
        m["pipeline_model_parallel_size"],
        m["context_parallel_size"],
    ) == (8, 2, 2)
    assert clipo.head_tensor_parallel and clipo.method.embed_dim % 8 == 0
    assert cfg["policy"]["make_sequence_length_divisible_by"] == 2 * 2 * 8  # 2*CP*TP (packed, SP)
    assert (
        load_recipe(CONFIGS / "scaling" / "llama70b_tp8_pp4.yaml")["policy"]["megatron_cfg"][
            "pipeline_model_parallel_size"
        ]
        == 4
    )


def test_overrides():
    cfg = load_recipe(
        CONFIGS / "track1_qwen3b.yaml",
        ["clipo.method.temperature=0.02", "grpo.max_num_steps=20", "+clipo.method.extra={a: 1}"],
    )
    assert cfg["clipo"]["method"]["temperature"] == 0.02 and cfg["grpo"]["max_num_steps"] == 20
    with pytest.raises(ValueError, match=r"did you mean clipo\.method\.temperature\?"):
        load_recipe(CONFIGS / "track1_qwen3b.yaml", ["clipo.method.temprature=0.02"])
    with pytest.raises(ValueError, match=r"not in the recipe; write \+grpo\.zzz=1 to add it"):
        load_recipe(CONFIGS / "track1_qwen3b.yaml", ["grpo.zzz=1"])  # nothing close: how to add
    with pytest.raises(ValueError, match="key.path=value"):
        load_recipe(CONFIGS / "track1_qwen3b.yaml", ["clipo.method.temperature"])


def test_defaults_cycle_and_missing(tmp_path):
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\nx: 1\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\ny: 2\n")
    with pytest.raises(ValueError, match="cycle"):
        load_recipe(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("defaults: nope.yaml\n")
    with pytest.raises(ValueError, match="does not exist"):
        load_recipe(tmp_path / "c.yaml")


def test_nemo_rl_parent_merged_when_root_given(tmp_path, monkeypatch):
    base = tmp_path / "examples" / "configs"
    base.mkdir(parents=True)
    (base / "grpo_math_1B_megatron.yaml").write_text(
        "from_nemo_rl: 7\npolicy:\n  model_name: base\n"
    )
    monkeypatch.setenv("NEMO_RL_ROOT", str(tmp_path))
    cfg = load_recipe(CONFIGS / "track1_qwen3b.yaml")
    assert cfg["from_nemo_rl"] == 7 and cfg["policy"]["model_name"] == "Qwen/Qwen2.5-3B-Instruct"


def _base():
    return copy.deepcopy(load_recipe(CONFIGS / "track1_qwen3b.yaml"))


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda c: c["policy"]["megatron_cfg"].update(enabled=False), "Megatron backend"),
        (lambda c: c["policy"]["dtensor_cfg"].update(enabled=True), "both true"),
        (
            lambda c: (
                c["policy"]["megatron_cfg"].update(context_parallel_size=2),
                c["policy"]["sequence_packing"].update(enabled=False),
            ),
            "sequence_packing",
        ),
        (
            lambda c: (
                c["policy"]["megatron_cfg"].update(tensor_model_parallel_size=3),
                c["clipo"].update(head_tensor_parallel=True),
            ),
            "not divisible by tensor_model_parallel_size=3",
        ),
        (
            lambda c: c["grpo"].update(num_generations_per_prompt=2),
            r"^grpo.num_generations_per_prompt=2: .* set grpo.num_generations_per_prompt >= 3",
        ),
        (  # issue 17 item 5: |A| explodes on continuous r' (tests/core/test_switch.py)
            lambda c: c["grpo"].update(use_leave_one_out_baseline=True),
            r"^grpo.use_leave_one_out_baseline=true with CLIPO: .* set it to false",
        ),
        (  # the estimator's own key
            lambda c: c["grpo"]["adv_estimator"].update(use_leave_one_out_baseline=True),
            "^grpo.adv_estimator.use_leave_one_out_baseline=true with CLIPO",
        ),
        (  # absent: NeMo-RL's default, on
            lambda c: c["grpo"].pop("use_leave_one_out_baseline"),
            "^grpo.use_leave_one_out_baseline=true with CLIPO",
        ),
        (
            lambda c: c["clipo"]["method"].update(max_group_size=4),
            r"max_group_size=4 < grpo.num_generations_per_prompt=16",
        ),
        (
            lambda c: c["policy"].update(train_global_batch_size=3000),
            "multiple of policy.train_global_batch_size",
        ),
        (lambda c: c["grpo"].update(max_num_steps=10), "never be updated"),
        (lambda c: c["grpo"]["adv_estimator"].update(name="gdpo"), "adv_estimator.name=grpo"),
        (lambda c: c["clipo"].update(objective="gspo"), "sequence_level_importance_ratios=true"),
        (
            lambda c: c["loss_fn"].update(
                sequence_level_importance_ratios=True, token_level_loss=False
            ),
            "token-level importance ratio",
        ),
        (lambda c: c["clipo"].update(objective="dapo"), "use_dynamic_sampling=true"),
        (
            lambda c: (
                c["clipo"].update(objective="dapo"),
                c["grpo"].update(use_dynamic_sampling=True),
            ),
            "asymmetric",
        ),
        (lambda c: c["clipo"].update(objectve="dapo"), "did you mean clipo.objective"),
        (lambda c: c["clipo"]["method"].update(temperature=0), "temperature"),
        (lambda c: c["clipo"].update(objective="ppo"), "objective"),
        (lambda c: c["loss_fn"].update(token_level_loss=False), "aggregates token-mean"),
        (lambda c: c["loss_fn"].update(ratio_clip_c=0.5), "ratio_clip_c .*must be > 1"),
        (lambda c: c["loss_fn"].update(kl_gradient="k2"), "kl_gradient must be one of"),
        (  # the k3 KL gradient runs Objective.loss, which has no importance-sampling correction
            lambda c: c["loss_fn"].update(
                kl_gradient="k3", use_importance_sampling_correction=True
            ),
            "loss_fn.use_importance_sampling_correction=True: .* set it to False",
        ),
        (
            lambda c: (
                c["clipo"].update(objective="gmpo"),
                c["loss_fn"].update(use_on_policy_kl_approximation=True),
            ),
            "loss_fn.use_on_policy_kl_approximation=True",
        ),
        (lambda c: c["clipo"].update(capture="hook"), "unknown key clipo.capture"),
        (  # issue item 6: no prev-logprob pass, nothing captured
            lambda c: c["loss_fn"].update(force_on_policy_ratio=True),
            r"skip the prev-logprob pass .* set loss_fn.force_on_policy_ratio=false",
        ),
        (  # issue item 6: graph replay runs no Python hook
            lambda c: c["policy"]["megatron_cfg"].update(cuda_graph_impl="local"),
            r"cuda_graph_impl='local': .* set policy.megatron_cfg.cuda_graph_impl=none",
        ),
        (
            lambda c: c["policy"]["megatron_cfg"].update(cuda_graph_impl="full_iteration"),
            "cuda_graph_impl='full_iteration'",
        ),
    ],
)
def test_validation_errors(edit, match):
    cfg = _base()
    edit(cfg)
    with pytest.raises(ValueError, match=match):
        validate_master_config(cfg)


@pytest.mark.parametrize(
    "edit",
    [
        # grpo_train runs the prev-logprob pass anyway when a threshold is set (v0.7.0, main)
        lambda c: (
            c["loss_fn"].update(force_on_policy_ratio=True),
            c["grpo"].update(seq_logprob_error_threshold=2.0),
        ),
        lambda c: c["policy"]["megatron_cfg"].update(cuda_graph_impl="none"),
        lambda c: (  # the baseline: leave-one-out and two rollouts are NeMo-RL's business
            c["clipo"].update(enabled=False),
            c["grpo"].update(use_leave_one_out_baseline=True, max_num_steps=10),
        ),
        lambda c: c["policy"]["megatron_cfg"].update(cuda_graph_impl=None),
        lambda c: (  # without CLIPO nothing is captured, so nothing is refused
            c["clipo"].update(enabled=False),
            c["loss_fn"].update(force_on_policy_ratio=True),
            c["policy"]["megatron_cfg"].update(cuda_graph_impl="local"),
        ),
        lambda c: c["loss_fn"].update(force_on_policy_ratio=False),
        lambda c: c["loss_fn"].update(kl_gradient="k3"),
        lambda c: (  # GMPO's token-mean (the paper appendix's wording) stays a named option
            c["clipo"].update(objective="gmpo"),
            c["loss_fn"].update(token_level_loss=True, ratio_clip_c=None),
        ),
    ],
)
def test_capture_settings_that_work_are_accepted(edit):
    cfg = _base()
    edit(cfg)
    validate_master_config(cfg)


def test_method_enabled_is_the_core_error():
    """`clipo.method.enabled` used to be silently ignored: now the one message CLIPOConfig gives."""
    from clipo_megatron.core.config import ClipoBlock, CLIPOConfig

    cfg = _base()
    cfg["clipo"]["method"]["enabled"] = False
    with pytest.raises(ValueError) as ours:
        validate_master_config(cfg)
    with pytest.raises(ValueError) as core:
        CLIPOConfig.from_dict({"enabled": False})
    assert str(ours.value) == str(core.value) and "clipo.enabled" in str(ours.value)
    assert issubclass(ClipoNemoRLConfig, ClipoBlock)


def test_typed_block_roundtrip():
    c = ClipoNemoRLConfig.from_dict({"objective": "gmpo", "method": {"embed_dim": 64}})
    assert ClipoNemoRLConfig.from_dict(c.to_dict()) == c


def test_cli_validate_only_prints_config():
    data = ROOT.parent / "shared" / "data" / "clipo"
    if not (data / "train" / "math75.parquet").is_file():
        pytest.skip(f"--validate-only checks the data files: needs {data} (missing)")
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "run_grpo_clipo.py"),
            "--config",
            str(CONFIGS / "track2_qwen7b_gmpo.yaml"),
            "--validate-only",
            "--verbose",
            "--no-cluster-env",
            "grpo.max_num_steps=100",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "CLIPO_DATA_DIR": str(data)},
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert '"objective": "gmpo"' in out.stdout and '"max_num_steps": 100' in out.stdout


def test_the_nemo_rl_driver_checks_through_the_one_rule(check_run_calls):
    """`validate_master_config` calls `ClipoBlock.check_run` with NeMo-RL's keys: patch the rule
    and the driver changes (the runner's half: tests/runner/test_train_cli.py)."""
    with pytest.raises(ValueError, match="patched rule"):
        validate_master_config(_base())
    assert check_run_calls == [(16, 1000000, False, "grpo.num_generations_per_prompt")]


def test_a_value_that_does_not_parse_as_an_interpolation_is_one_line():
    """A crafted "${oops" (a checkpoint's config.yaml, say) is a ValueError naming the key, not
    OmegaConf's GrammarParseError traceback."""
    from clipo_megatron.nemo_rl.port.master_config import dotted_get

    cfg = {"policy": {"megatron_cfg": {"tensor_model_parallel_size": "${oops"}}}
    with pytest.raises(ValueError, match="policy.megatron_cfg.tensor_model_parallel_size: not a"):
        dotted_get(cfg, "policy.megatron_cfg.tensor_model_parallel_size", 1)
