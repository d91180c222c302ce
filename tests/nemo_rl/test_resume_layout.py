# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A resume at another TP / PP with the distributed optimizer is refused by the preflight.

Megatron-Bridge saves the distributed optimizer's state `dp_reshardable` (NeMo-RL does not forward
`dist_ckpt_optim_fully_reshardable`) and raises on a (TP, PP) change only after the model is
built. Checkpoints are faked on disk: a `step_N` directory with the layout record.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from clipo_megatron.nemo_rl.guard import preflight as pf
from clipo_megatron.nemo_rl.guard.recipes import load_recipe
from clipo_megatron.nemo_rl.resume_layout import (
    LAYOUT_FILE,
    layout_of,
    recorded_layout,
    resume_step_dir,
    save_layout,
)

ROOT = Path(__file__).resolve().parents[2]
TRACK1 = load_recipe(ROOT / "examples" / "configs" / "track1_qwen3b.yaml")
MC = "policy.megatron_cfg."


@pytest.fixture(autouse=True)
def _laptop(monkeypatch, tmp_path):
    monkeypatch.setattr(pf, "nemo_rl_importable", lambda: False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


def _recipe(
    ckpt: Path, *, distributed_optimizer=True, overlap_grad_reduce=True, nodes=1, **megatron
) -> dict:
    cfg = copy.deepcopy(TRACK1)
    cfg["data"] = {}
    cfg["checkpointing"]["checkpoint_dir"] = str(ckpt)
    cfg["cluster"]["num_nodes"] = nodes
    mc = cfg["policy"]["megatron_cfg"]
    mc.setdefault("optimizer", {})["use_distributed_optimizer"] = distributed_optimizer
    ddp = mc.setdefault("distributed_data_parallel_config", {})
    ddp["overlap_grad_reduce"] = overlap_grad_reduce
    mc.update(megatron)
    return cfg


def _saved(ckpt: Path, step: int, *, optimizer_saved=True, **recipe) -> Path:
    """A checkpoint saved by a run with these settings (the layout record only)."""
    step_dir = ckpt / f"step_{step}"
    layout = layout_of(_recipe(ckpt, **recipe))
    save_layout(str(step_dir), layout, optimizer_saved=optimizer_saved)
    return step_dir


def _problems(cfg: dict) -> list[str]:
    """The preflight's lines but those about CLIPO's own files in the checkpoint (these fakes
    hold only the layout; tests/nemo_rl/test_preflight_resume.py holds the head's checks)."""
    problems = pf.preflight_config(cfg, cluster_env=False).problems
    return [p for p in problems if not (p.startswith("resume from ") and "CLIPO" in p)]


def test_the_layout_round_trips_beside_the_checkpoint(tmp_path):
    step_dir = _saved(tmp_path, 3, tensor_model_parallel_size=2, sequence_parallel=True)
    assert sorted(p.name for p in step_dir.iterdir()) == [LAYOUT_FILE]
    layout, source = recorded_layout(step_dir)
    assert source == str(step_dir / LAYOUT_FILE)
    assert layout == {
        "tp": 2,
        "pp": 1,
        "cp": 1,
        "sequence_parallel": True,
        "use_distributed_optimizer": True,
        "overlap_grad_reduce": True,
        "ep": 1,
        "etp": 2,  # expert_tensor_parallel_size unset here: TP, as Megatron-Core defaults it
        "dp": 4,
        "optimizer_saved": True,
    }


def test_resume_is_from_the_highest_step_n_as_nemo_rl_picks_it(tmp_path):
    for name in ("step_9", "step_10", "tmp_step_11", "step_x", "old_step_12"):
        (tmp_path / name).mkdir()
    assert resume_step_dir({"checkpointing": {"checkpoint_dir": str(tmp_path)}}) == (
        tmp_path / "step_10"
    )
    assert resume_step_dir({"checkpointing": {"checkpoint_dir": str(tmp_path / "none")}}) is None


def test_tp_and_pp_changes_with_the_distributed_optimizer_are_one_line(tmp_path):
    _saved(tmp_path, 2, tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
    _saved(tmp_path, 10)  # the latest: TP 1, PP 1
    cfg = _recipe(tmp_path, tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
    step_10 = tmp_path / "step_10"
    assert _problems(cfg) == [
        f"{MC}tensor_model_parallel_size: saved 1, now 2; {MC}pipeline_model_parallel_size: "
        f"saved 1, now 2 (resuming {step_10}, layout from {step_10 / LAYOUT_FILE}): "
        "Megatron-Bridge cannot reshard the distributed optimizer's saved state (dp_reshardable) "
        "across TP / PP; resume at the saved layout, or export its weights (NeMo-RL's "
        "examples/converters/convert_megatron_to_hf.py) and start a new run from them "
        "(policy.model_name=<export>, another checkpointing.checkpoint_dir)"
    ]
    assert _problems(_recipe(tmp_path)) == []  # at the saved layout


def test_only_what_bridge_cannot_reshard_is_named(tmp_path):
    """DP and CP (the state is sharded over DP x CP) and sequence parallel may change; without
    the distributed optimizer now, or without saved optimizer state, any layout loads."""
    _saved(tmp_path, 1, tensor_model_parallel_size=2)
    cfg = _recipe(tmp_path, context_parallel_size=2, sequence_parallel=True)
    cfg["policy"]["sequence_packing"]["enabled"] = True
    cfg["policy"]["make_sequence_length_divisible_by"] = 8
    cfg["cluster"]["num_nodes"] = 2  # 16 GPUs: DP 8 here, DP 4 at TP 2 (saved: 4)
    (line,) = _problems(cfg)
    assert line.startswith(f"{MC}tensor_model_parallel_size: saved 2, now 1 (resuming ")
    cfg["policy"]["megatron_cfg"]["tensor_model_parallel_size"] = 2
    assert _problems(cfg) == []
    assert _problems(_recipe(tmp_path, distributed_optimizer=False)) == []
    _saved(tmp_path, 2, optimizer_saved=False, tensor_model_parallel_size=2)
    assert _problems(_recipe(tmp_path)) == []


def test_an_older_checkpoint_is_read_from_nemo_rls_config_or_warned_about(tmp_path):
    step = tmp_path / "step_4"
    step.mkdir()
    cfg = _recipe(tmp_path, tensor_model_parallel_size=2)
    report = pf.preflight_config(cfg, cluster_env=False)
    assert [p for p in report.problems if "CLIPO head" not in p] == []
    assert [w for w in report.warnings if str(step) in w] == [
        f"{step} records no parallel layout (saved before {LAYOUT_FILE}): NeMo-RL resumes from "
        "it, and Megatron-Bridge refuses a resume at another TP / PP with "
        f"{MC}optimizer.use_distributed_optimizer=true only after the model loads; resume at the "
        "layout it was saved with"
    ]
    (step / "config.yaml").write_text(yaml.safe_dump(_recipe(tmp_path)))  # NeMo-RL's own copy
    assert _problems(cfg) == [
        f"{MC}tensor_model_parallel_size: saved 1, now 2 (resuming {step}, layout from "
        f"{step / 'config.yaml'}): Megatron-Bridge cannot reshard the distributed optimizer's "
        "saved state (dp_reshardable) across TP / PP; resume at the saved layout, or export its "
        "weights (NeMo-RL's examples/converters/convert_megatron_to_hf.py) and start a new run "
        "from them (policy.model_name=<export>, another checkpointing.checkpoint_dir)"
    ]


def test_a_malformed_record_is_one_line_naming_it(tmp_path):
    step = tmp_path / "step_1"
    step.mkdir()
    (step / LAYOUT_FILE).write_text(json.dumps({"format_version": 1, "tp": 1}))
    (line,) = _problems(_recipe(tmp_path))
    assert line == (
        f"resume layout: cannot check (ValueError: {step / LAYOUT_FILE}: not a CLIPO layout "
        "record; delete it)"
    )


@pytest.mark.parametrize("version", [None, 2])
def test_a_record_of_another_format_version_is_one_line_naming_it(tmp_path, version):
    step = _saved(tmp_path, 1)
    saved = json.loads((step / LAYOUT_FILE).read_text())
    assert saved.pop("format_version") == 1
    if version is not None:
        saved["format_version"] = version
    (step / LAYOUT_FILE).write_text(json.dumps(saved))
    (line,) = _problems(_recipe(tmp_path))
    what = "no format version" if version is None else "format version 2"
    assert line == (
        f"resume layout: cannot check (ValueError: {step / LAYOUT_FILE} has {what}; this "
        "clipo_megatron reads version 1 only: delete it (the preflight then reads config.yaml))"
    )


@pytest.fixture
def nemo_rl_modules_restored():
    """The fake tree's modules leave `sys.modules` with the test: a later test importing NeMo-RL
    (the recipes' preflight probes its version) found the fake and called it unsupported."""
    import sys

    def ours(m: str) -> bool:
        return m == "nemo_rl" or m.startswith("nemo_rl.")

    saved = {m: mod for m, mod in sys.modules.items() if ours(m)}
    for m in saved:
        del sys.modules[m]
    yield
    for m in [m for m in sys.modules if ours(m)]:
        del sys.modules[m]
    sys.modules.update(saved)


@pytest.mark.parametrize("optimizer", [True, False])
def test_the_policy_records_its_layout_with_each_checkpoint(
    tmp_path, monkeypatch, optimizer, nemo_rl_modules_restored
):
    """`ClipoPolicy.save_checkpoint` over a NeMo-RL `Policy` (the seams' fake tree)."""
    from clipo_megatron.nemo_rl.advantage_estimator import ClipoRunState
    from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
    from clipo_megatron.nemo_rl.policy import make_clipo_policy_class
    from clipo_megatron.nemo_rl.port.seam_checks import STOCK_WORKER_FQN
    from tests.nemo_rl.fake_nemo_rl import write_tree

    write_tree(tmp_path / "src" / "nemo_rl")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    cls = make_clipo_policy_class(ClipoNemoRLConfig.from_dict(TRACK1["clipo"]), ClipoRunState())
    # a worker class with a Python of its own in the fake tree's registry (NeMo-RL's argument)
    policy = cls(
        cluster=None, config=None, tokenizer=None, worker_extension_cls_fqn=STOCK_WORKER_FQN
    )
    policy.cfg = _recipe(tmp_path, tensor_model_parallel_size=2)["policy"]  # as NeMo-RL's Policy
    policy.data_parallel_size = 4
    step = tmp_path / "ckpt" / "step_3"
    policy.save_checkpoint(
        weights_path=str(step / "policy" / "weights"),
        optimizer_path=str(step / "policy" / "optimizer") if optimizer else None,
    )
    layout, _ = recorded_layout(step)
    assert (layout["tp"], layout["dp"], layout["optimizer_saved"]) == (2, 4, optimizer)


def test_a_worker_class_without_a_python_is_refused(
    tmp_path, monkeypatch, nemo_rl_modules_restored
):
    """NeMo-RL's `worker_extension_cls_fqn` may name a subclass of CLIPO's worker; one NeMo-RL
    has no Python for is refused before any worker starts, in one line."""
    from clipo_megatron.nemo_rl.advantage_estimator import ClipoRunState
    from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
    from clipo_megatron.nemo_rl.policy import make_clipo_policy_class
    from tests.nemo_rl.fake_nemo_rl import write_tree

    write_tree(tmp_path / "src" / "nemo_rl")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    cls = make_clipo_policy_class(ClipoNemoRLConfig.from_dict(TRACK1["clipo"]), ClipoRunState())
    with pytest.raises(ValueError, match=r"worker class my\.Worker has no Python environment"):
        cls(cluster=None, config=None, tokenizer=None, worker_extension_cls_fqn="my.Worker")


def test_gradient_buckets_of_another_size_are_refused(tmp_path):
    """With overlap_grad_reduce a bucket holds max(40M, 1M x DP) elements: DP 8 -> 16 keeps
    40M; DP 8 -> 64 (8 nodes) or overlap_grad_reduce toggled does not."""
    _saved(tmp_path, 1)  # DP 8, overlap_grad_reduce on
    assert _problems(_recipe(tmp_path, nodes=2)) == []
    step = tmp_path / "step_1"
    assert _problems(_recipe(tmp_path, nodes=8)) == [
        f"{MC}distributed_data_parallel_config.overlap_grad_reduce=true at DP 64 (cluster."
        "num_nodes x gpus_per_node / TP*PP*CP) gives gradient buckets of 64M elements, saved 40M "
        f"elements (overlap_grad_reduce=true, DP 8; resuming {step}): Megatron-Core loads the "
        "distributed optimizer's state only into buckets of the saved sizes; resume at the saved "
        "layout, or export its weights (NeMo-RL's examples/converters/convert_megatron_to_hf.py) "
        "and start a new run from them (policy.model_name=<export>, another "
        "checkpointing.checkpoint_dir)"
    ]
    (line,) = _problems(_recipe(tmp_path, overlap_grad_reduce=False))
    assert line.startswith(
        f"{MC}distributed_data_parallel_config.overlap_grad_reduce=false at DP 8 (cluster."
        "num_nodes x gpus_per_node / TP*PP*CP) gives gradient buckets of one per buffer, saved "
        "40M elements"
    )
    assert _problems(_recipe(tmp_path, nodes=8, distributed_optimizer=False)) == []


def test_validate_only_refuses_in_one_line_before_any_model_loads(tmp_path):
    import subprocess
    import sys

    _saved(tmp_path / "ckpt", 5)  # TP 1
    run = [
        sys.executable,
        str(ROOT / "examples" / "run_grpo_clipo.py"),
        "--config",
        str(ROOT / "examples" / "configs" / "track1_qwen3b.yaml"),
        "--validate-only",
        "--no-cluster-env",
        f"checkpointing.checkpoint_dir={tmp_path / 'ckpt'}",
        "+policy.megatron_cfg.optimizer.use_distributed_optimizer=true",
        "+policy.megatron_cfg.distributed_data_parallel_config.overlap_grad_reduce=true",
        "policy.megatron_cfg.tensor_model_parallel_size=2",
    ]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CLIPO_DATA_DIR": str(tmp_path)}
    env["PYTHONPATH"] = str(ROOT)  # this checkout, not an installed copy
    out = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("  - policy.megatron_cfg.")]
    assert lines == [
        f"  - {MC}tensor_model_parallel_size: saved 1, now 2 (resuming {tmp_path / 'ckpt'}"
        f"/step_5, layout from {tmp_path / 'ckpt'}/step_5/{LAYOUT_FILE}): Megatron-Bridge cannot "
        "reshard the distributed optimizer's saved state (dp_reshardable) across TP / PP; resume "
        "at the saved layout, or export its weights (NeMo-RL's examples/converters/"
        "convert_megatron_to_hf.py) and start a new run from them (policy.model_name=<export>, "
        "another checkpointing.checkpoint_dir)"
    ]


def test_buckets_are_not_compared_when_the_recipe_does_not_say(tmp_path):
    """A recipe checked without NeMo-RL's parent may lack overlap_grad_reduce: unknown, not off."""
    _saved(tmp_path, 1)  # overlap_grad_reduce on
    cfg = _recipe(tmp_path)
    del cfg["policy"]["megatron_cfg"]["distributed_data_parallel_config"]["overlap_grad_reduce"]
    assert _problems(cfg) == []


@pytest.mark.parametrize("distributed_optimizer", [True, False])
def test_an_moe_resume_across_the_expert_groups_is_one_line(tmp_path, distributed_optimizer):
    """EP 2 -> EP 1 (expert TP = TP = 1): the experts leave Megatron-Core's expert groups, the
    saved optimizer's parameter groups do not match (measured: `_filter_and_reorder_param_groups`
    stops the load); EP 2 -> EP 4 stays inside them and loads (test_moe_layouts' move case)."""
    moe = dict(expert_tensor_parallel_size=1, distributed_optimizer=distributed_optimizer)
    _saved(tmp_path, 2, expert_model_parallel_size=2, **moe)
    step = tmp_path / "step_2"
    assert _problems(_recipe(tmp_path, expert_model_parallel_size=4, **moe)) == []
    assert _problems(_recipe(tmp_path, expert_model_parallel_size=1, **moe)) == [
        f"{MC}expert_model_parallel_size: saved 2, now 1 (resuming {step}, layout from "
        f"{step / LAYOUT_FILE}): the experts' optimizer state is kept apart only when they use "
        "Megatron-Core's expert groups (expert_model_parallel_size > 1 or expert_tensor_"
        "parallel_size != tensor_model_parallel_size), so the saved optimizer's parameter groups "
        "do not match this layout's and the load stops; resume at the saved layout, or export "
        "its weights (NeMo-RL's examples/converters/convert_megatron_to_hf.py) and start a new "
        "run from them (policy.model_name=<export>, another checkpointing.checkpoint_dir)"
    ]
    # EP 1 with expert TP 1 != TP 2 also uses the expert groups: the same groups as EP 2 (TP 2)
    _saved(tmp_path, 3, expert_model_parallel_size=2, tensor_model_parallel_size=2, **moe)
    assert (
        _problems(
            _recipe(tmp_path, expert_model_parallel_size=1, tensor_model_parallel_size=2, **moe)
        )
        == []
    )


def test_a_dense_layout_is_not_judged_by_the_expert_rule(tmp_path):
    """EP 1 on both sides (every dense recipe): expert TP against TP says nothing without experts."""
    _saved(
        tmp_path,
        1,
        tensor_model_parallel_size=2,
        expert_tensor_parallel_size=1,
        distributed_optimizer=False,
    )
    assert (
        _problems(_recipe(tmp_path, expert_tensor_parallel_size=1, distributed_optimizer=False))
        == []
    )
