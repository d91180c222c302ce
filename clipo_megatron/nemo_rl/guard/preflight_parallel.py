# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Preflight: parallel sizes against the model's shapes and NeMo-RL's padding rules.

Each rule here is one NeMo-RL / Megatron-Core / vLLM assertion that otherwise fires on the
cluster after the job has queued, loaded weights and started Ray. Model shapes come from the
HF `config.json` of `policy.model_name` (a local path or the HF cache; never downloaded), else
from `KNOWN_MODELS`, the published configs of the recipes' models.

The vocabulary is not a constraint: Megatron pads it to a multiple of 128 x TP
(`make_vocab_size_divisible_by`) and vLLM pads its own embedding, so any size fits any TP.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clipo_megatron.nemo_rl.guard.training_cluster import training_cluster
from clipo_megatron.nemo_rl.port.master_config import as_conf, dotted_get


@dataclass(frozen=True)
class ModelShape:
    layers: int
    heads: int
    kv_heads: int
    hidden: int
    vocab: int
    source: str = "built-in table"


# From each model's published config.json (num_hidden_layers, num_attention_heads,
# num_key_value_heads, hidden_size, vocab_size).
KNOWN_MODELS = {
    "Qwen/Qwen2.5-3B-Instruct": ModelShape(36, 16, 2, 2048, 151936),
    "Qwen/Qwen2.5-7B-Instruct": ModelShape(28, 28, 4, 3584, 152064),
    "Qwen/Qwen2.5-32B-Instruct": ModelShape(64, 40, 8, 5120, 152064),
    "meta-llama/Llama-3.1-8B-Instruct": ModelShape(32, 32, 8, 4096, 128256),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": ModelShape(28, 28, 4, 3584, 152064),
    "meta-llama/Llama-3.1-70B-Instruct": ModelShape(80, 64, 8, 8192, 128256),
    "meta-llama/Llama-3.3-70B-Instruct": ModelShape(80, 64, 8, 8192, 128256),
}


def _hf_cache_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def local_config_json(model_name: str) -> Path | None:
    """`config.json` of a local model directory or of a cached HF snapshot (no network)."""
    direct = Path(model_name).expanduser() / "config.json"
    if direct.is_file():
        return direct
    if model_name.count("/") != 1:
        return None
    repo_dir = "models--" + model_name.replace("/", "--")
    for cache in _hf_cache_dirs():
        snaps = sorted((cache / repo_dir / "snapshots").glob("*/config.json"))
        if snaps:
            return snaps[-1]
    return None


def model_shape(model_name: str) -> ModelShape | None:
    path = local_config_json(model_name)
    if path is not None:
        hf = json.loads(path.read_text())
        hf = hf.get("text_config", hf)  # multimodal configs nest the language model's
        heads = int(hf["num_attention_heads"])
        return ModelShape(
            layers=int(hf["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(hf.get("num_key_value_heads") or heads),
            hidden=int(hf["hidden_size"]),
            vocab=int(hf["vocab_size"]),
            source=str(path),
        )
    return KNOWN_MODELS.get(model_name)


def min_sequence_multiple(cfg: dict[str, Any]) -> int:
    """The smallest `make_sequence_length_divisible_by` the recipe's path accepts.

    Packed: NeMo-RL's `_get_pack_sequence_parameters_for_megatron` (models/megatron/data.py)
    asserts a multiple of 2*CP when CP > 1, times TP when TP > 1 with sequence parallel.
    Unpacked (CP needs packing there): NeMo-RL pads each batch only to this multiple, and under
    sequence parallel Megatron-Core's embedding scatters the sequence over the TP ranks
    (`tensor_parallel.mappings._split_along_first_dim` asserts the length divides by TP), so a
    batch whose longest row is not a multiple of TP stops the run: TP under sequence parallel.
    """
    conf = as_conf(cfg)  # a null counts as unset here (parallel sizes default to 1)
    mc = "policy.megatron_cfg."
    tp = int(_get(conf, mc + "tensor_model_parallel_size", 1))
    cp = int(_get(conf, mc + "context_parallel_size", 1))
    sp = bool(_get(conf, mc + "sequence_parallel", False))
    factor = 1
    if _packed(conf) and cp > 1:
        factor *= 2 * cp
    if tp > 1 and sp:
        factor *= tp
    return factor


def _packed(conf) -> bool:
    return bool(_get(conf, "policy.sequence_packing.enabled", False))


@dataclass(frozen=True)
class ParallelSizes:
    """The layout a recipe asks for (a null or missing size is 1, sequence parallel off)."""

    tp: int
    pp: int
    cp: int
    vllm_tp: int
    sp: bool

    @classmethod
    def of(cls, conf) -> ParallelSizes:
        mc = "policy.megatron_cfg."
        return cls(
            tp=int(_get(conf, mc + "tensor_model_parallel_size", 1)),
            pp=int(_get(conf, mc + "pipeline_model_parallel_size", 1)),
            cp=int(_get(conf, mc + "context_parallel_size", 1)),
            vllm_tp=int(_get(conf, "policy.generation.vllm_cfg.tensor_parallel_size", 1)),
            sp=bool(_get(conf, mc + "sequence_parallel", False)),
        )


def _get(conf, key: str, default: Any = None) -> Any:
    return dotted_get(conf, key, default, none_is_default=True)  # a null counts as unset here


def check_parallel(cfg: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, warnings) for the parallel layout of a merged recipe."""
    conf = as_conf(cfg)
    size = ParallelSizes.of(conf)
    problems = _sequence_problems(cfg, conf, size)
    shape_problems, warnings = _model_problems(conf, size)
    return problems + shape_problems + _cluster_problems(conf, size), warnings


def _sequence_problems(cfg: dict[str, Any], conf, size: ParallelSizes) -> list[str]:
    need = min_sequence_multiple(cfg)
    div = int(_get(conf, "policy.make_sequence_length_divisible_by", 1))
    if div % need == 0:
        return []
    if _packed(conf):
        why = (
            f"NeMo-RL's packed path asserts a multiple of 2*CP when CP > 1, times TP under "
            f"sequence parallel (models/megatron/data.py _get_pack_sequence_parameters_for_megatron); "
            f"here TP={size.tp}, SP={'on' if size.sp else 'off'}, CP={size.cp}"
        )
    else:
        why = (
            f"unpacked, NeMo-RL pads each batch only to this multiple and Megatron-Core's "
            f"sequence-parallel embedding splits the sequence over TP={size.tp} "
            "(tensor_parallel/mappings.py _split_along_first_dim asserts it divides), so a batch "
            "whose longest row is not a multiple of TP stops the run"
        )
    return [
        f"policy.make_sequence_length_divisible_by={div} is not a multiple of {need} ({why}); "
        f"set policy.make_sequence_length_divisible_by={need}"
    ]


def _model_problems(conf, size: ParallelSizes) -> tuple[list[str], list[str]]:
    """The model's heads and layers against TP, PP and vLLM's TP (a warning if unknown)."""
    mc = "policy.megatron_cfg."
    tp, pp, vtp = size.tp, size.pp, size.vllm_tp
    name = str(_get(conf, "policy.model_name", ""))
    shape = model_shape(name)
    if shape is None:
        return [], [
            f"policy.model_name={name!r}: no local config.json and not in the built-in table; "
            "attention heads / layers vs TP / PP not checked"
        ]
    problems = []
    where = f"{name} ({shape.source})"
    if shape.heads % tp or shape.kv_heads % tp:
        problems.append(
            f"{mc}tensor_model_parallel_size={tp}: {where} has {shape.heads} attention heads "
            f"and {shape.kv_heads} query groups, both must divide by TP; pick a TP dividing "
            f"{shape.kv_heads}"
        )
    if shape.layers % pp:
        problems.append(
            f"{mc}pipeline_model_parallel_size={pp}: {where} has {shape.layers} layers, "
            f"not divisible by PP; pick a PP dividing {shape.layers}"
        )
    if shape.heads % vtp or (shape.kv_heads % vtp and vtp % shape.kv_heads):
        problems.append(
            f"policy.generation.vllm_cfg.tensor_parallel_size={vtp}: vLLM needs {where}'s "
            f"{shape.heads} heads divisible by it and its {shape.kv_heads} KV heads divisible "
            "by it (or it by them); pick a divisor of both"
        )
    return problems, []


def _cluster_problems(conf, size: ParallelSizes) -> list[str]:
    """The training cluster against TP*PP*CP, and the batch against the data-parallel size it
    leaves (the GPUs NeMo-RL trains on: `training_cluster`, generation and reward nodes apart)."""
    cluster = training_cluster(conf)
    if cluster is None:
        return []
    world = cluster.gpus
    tp, pp, cp = size.tp, size.pp, size.cp
    model_ranks = tp * pp * cp
    if world <= 0 or world % model_ranks:
        return [  # NeMo-RL's lm_policy.Policy asserts it (world size divisible by PP * CP * TP)
            f"cluster.num_nodes*gpus_per_node={cluster.total} GPUs{cluster.note()}: {world} "
            f"training GPUs is not a multiple of TP*PP*CP={tp}*{pp}*{cp}={model_ranks}; change "
            "cluster.num_nodes or the parallel sizes"
        ]
    dp = world // model_ranks
    gbs = int(_get(conf, "policy.train_global_batch_size", 0))
    mbs = int(_get(conf, "policy.train_micro_batch_size", 1))
    if gbs % dp:
        return [
            f"policy.train_global_batch_size={gbs} is not a multiple of the data-parallel size "
            f"{dp} ({world} GPUs{cluster.note()} / TP*PP*CP {model_ranks}); NeMo-RL would drop "
            f"the remainder; use a multiple of {dp}"
        ]
    packed = _get(conf, "policy.sequence_packing.enabled", False) or _get(
        conf, "policy.dynamic_batching.enabled", False
    )
    if not packed and (gbs // dp) % mbs:
        return [
            f"policy.train_micro_batch_size={mbs} does not divide the per-rank batch "
            f"{gbs // dp} (train_global_batch_size {gbs} / DP {dp}); pick a divisor"
        ]
    return []
