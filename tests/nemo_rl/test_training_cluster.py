# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The GPUs NeMo-RL trains on, as its grpo.setup counts them: hand-counted layouts and NeMo-RL's
own non-colocated recipes (their data-parallel size was once refused as DP 5 of 80 GPUs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from clipo_megatron.nemo_rl.guard.preflight_parallel import check_parallel
from clipo_megatron.nemo_rl.guard.training_cluster import training_cluster

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT.parent / "shared" / "upstream" / "NeMo-RL-7ea279a"
SRC = Path(os.environ.get("NEMO_RL_SRC") or SNAPSHOT)
LLM = SRC / "examples" / "configs" / "recipes" / "llm"


def _conf(nodes, gpn, *, colocated=True, gen_nodes=None, gen_gpn=None, rm=None):
    cfg = {
        "cluster": {"num_nodes": nodes, "gpus_per_node": gpn},
        "policy": {
            "generation": {
                "colocated": {
                    "enabled": colocated,
                    "resources": {"num_nodes": gen_nodes, "gpus_per_node": gen_gpn},
                }
            }
        },
        "data": {"train": {"env_name": "math"}},
    }
    if rm:
        cfg["data"]["validation"] = [{"env_name": "reward_model"}]
        cfg["env"] = {"reward_model": {"resources": {"num_nodes": rm[0], "gpus_per_node": rm[1]}}}
    return OmegaConf.create(cfg)


@pytest.mark.parametrize(
    "kwargs, gpus",
    [
        (dict(nodes=4, gpn=8), 32),  # colocated: every GPU trains
        (dict(nodes=10, gpn=8, colocated=False, gen_nodes=2, gen_gpn=8), 64),  # 8 of 10 nodes
        (dict(nodes=3, gpn=8, colocated=False, gen_nodes=1, gen_gpn=8), 16),
        (dict(nodes=1, gpn=8, colocated=False, gen_gpn=2), 6),  # one node: its GPUs split
        (dict(nodes=1, gpn=8, rm=(1, 2)), 6),  # one node: the reward model's GPUs
        (dict(nodes=4, gpn=8, rm=(1, 8)), 24),  # many nodes: the reward model's node
        (dict(nodes=4, gpn=8, colocated=False, gen_nodes=1, gen_gpn=8, rm=(1, 8)), 16),
    ],
)
def test_training_gpus_by_hand(kwargs, gpus):
    cluster = training_cluster(_conf(**kwargs))
    assert cluster is not None and cluster.gpus == gpus
    assert cluster.total == kwargs["nodes"] * kwargs["gpn"]


def test_no_cluster_sizes_no_count():
    assert training_cluster(OmegaConf.create({"cluster": {"num_nodes": None}})) is None


@pytest.mark.skipif(not LLM.is_dir(), reason=f"needs NeMo-RL's recipes (NEMO_RL_SRC or {SNAPSHOT})")
@pytest.mark.parametrize(
    "recipe, gpus, dp",
    [
        ("grpo-qwen3-30ba3b-10n8g-megatron-cp2-r3-async.yaml", 64, 4),  # TP*PP*CP 16
        ("grpo-cispo-mm1-async-lag1-highoffpolicy-qwen3-30ba3b-3n8g-megatron-cispo.yaml", 16, 8),
    ],
)
def test_nemo_rls_non_colocated_recipes_fit(recipe, gpus, dp, monkeypatch):
    """Their global batch divides the DP size NeMo-RL trains with (no refusal), as NeMo-RL runs them."""
    from clipo_megatron.nemo_rl.guard.preflight_parallel import ParallelSizes
    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    monkeypatch.setenv("NEMO_RL_ROOT", str(SRC))
    cfg = load_recipe(LLM / recipe)
    conf = OmegaConf.create(cfg)
    cluster = training_cluster(conf)
    size = ParallelSizes.of(conf)
    assert cluster is not None and cluster.gpus == gpus
    assert cluster.gpus // (size.tp * size.pp * size.cp) == dp
    problems, _ = check_parallel(cfg)
    assert not [p for p in problems if "data-parallel" in p or "TP*PP*CP" in p], problems
