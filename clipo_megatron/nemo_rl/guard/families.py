# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Which model families and training features a recipe uses, and which of them CLIPO has run with.

"Accepted" by the preflight means the recipe passes every check; it does not mean CLIPO has run
on that model. This module is the one place that says what has: each family and feature below
names the test in which CLIPO ran with it inside NeMo-RL's own Megatron worker (on CPU), or why
it has not. The preflight's OK line and `recipe_verdicts`' table read it; when a family's case
lands, its entry here gains the test and every recipe of that family follows.

Families are told apart by the recipe alone (`policy.model_name` and its keys, never the hub or
`$HF_HOME`), as Megatron-Bridge picks the model class from the Hugging Face architecture.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Part:
    """A model family or a training feature, and CLIPO's record with it."""

    name: str
    ran_in: str | None  # the tests (path::name, comma-separated) in which CLIPO ran with it
    why_not: str = ""  # why it has not, in one clause

    @property
    def ran(self) -> bool:
        return self.ran_in is not None


DENSE = Part(
    "GPTModel (Llama, Qwen2.5, Qwen3)",
    "tests/nemo_rl/test_contract.py::test_grpo_train, "
    "tests/nemo_rl/real_worker/test_layouts.py::test_layout_equals_tp1",
)
MOE = Part(
    "MoE",
    "tests/nemo_rl/real_worker/test_moe_layouts.py::test_moe_layout_equals_ep1, "
    "tests/nemo_rl/test_contract_moe.py::test_moe_ep2_in_grpo_train",
)
HYBRID = Part(
    "hybrid Mamba (Nemotron-H / Nemotron 3)",
    "tests/nemo_rl/real_worker/test_hybrid_worker.py::test_hybrid_worker_matches_hf, "
    "tests/nemo_rl/test_contract_hybrid.py::test_hybrid_moe_ep2_in_grpo_train",
)
MLA = Part(
    "multi-latent attention (DeepSeek-V3 / Moonlight / GLM)",
    "tests/nemo_rl/real_worker/test_mla_model.py::test_mla_logprobs_and_pooled_rows_match_hugging_face, "
    "tests/nemo_rl/real_worker/test_mla_model.py::test_mla_ep2_equals_ep1, "
    "tests/nemo_rl/test_contract_mla.py::test_mla_in_grpo_train",
)
DSA = Part("DeepSeek sparse attention (GLM-5.1)", None, "its indexer kernels are GPU-only")
GATED_DELTANET = Part(
    "gated DeltaNet in Bridge's Qwen3VLModel (Qwen3.5)",
    "tests/nemo_rl/real_worker/test_qwen35.py::test_nemo_rl_worker_clipo_on_off",
)
GPT_OSS = Part(
    "gpt-oss (attention sinks, sliding windows)",
    "tests/nemo_rl/real_worker/test_gptoss.py::test_worker_gptoss_clipo_on_equals_off",
)
MOE_IN_HYBRID = Part(  # grpo_train at EP 2 with a checkpoint and an exact resume
    "MoE layers in a hybrid Mamba stack",
    "tests/nemo_rl/test_contract_hybrid.py::test_hybrid_moe_ep2_in_grpo_train",
)
MOE_IN_GATED_DELTANET = Part(
    "MoE layers in a gated DeltaNet stack (Qwen3.5 MoE)",
    "tests/nemo_rl/real_worker/test_qwen35_moe.py::test_nemo_rl_worker_qwen35_moe_clipo_on_off",
)

MTP = Part(
    "MTP",
    "tests/nemo_rl/real_worker/test_hybrid_mtp.py::test_mtp_worker_matches_hf_and_trains",
)
LORA = Part("LoRA", None, "Bridge's LoRA layers are TransformerEngine's; not run on CPU")
FP8 = Part("FP8 training", None, "needs TransformerEngine's FP8 kernels on a GPU")
MODELOPT = Part(
    "ModelOpt quantization (NVFP4)", None, "quantized training needs ModelOpt's GPU kernels"
)
FUSED_LOGPROBS = Part(
    "fused linear logprobs", None, "NeMo-RL's fused output-layer path has not run with CLIPO"
)
EAGLE3 = Part("Eagle3 draft training", None, "the draft model's training has not run with CLIPO")
MEGATRON_GENERATION = Part(
    "Megatron generation backend", None, "Megatron-Core's inference engine is CUDA-only"
)
MOONCAKE = Part("TransferQueue on mooncake", None, "mooncake needs libcuda / libibverbs")
CUDA_GRAPHS = Part(
    "training CUDA graphs",
    None,
    "CUDA graphs need a GPU",
)

_MOE_NAME = re.compile(r"\d+(\.\d+)?b-?a\d+(\.\d+)?b|moonlight|deepseek|dsv3|glm-5|gpt-oss|-moe")


def _get(config: dict[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = config
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def _model(config: dict[str, Any]) -> str:
    return str(_get(config, "policy.model_name", "") or "").lower()


def _moe(config: dict[str, Any]) -> bool:
    ep = int(_get(config, "policy.megatron_cfg.expert_model_parallel_size", 1) or 1)
    return ep > 1 or bool(_MOE_NAME.search(_model(config)))


FAMILY_RULES: tuple[tuple[Part, Callable[[dict[str, Any]], bool]], ...] = (
    (HYBRID, lambda c: bool(re.search(r"nemotron-(h|3|nano-\d+b-v2|nano-9b)", _model(c)))),
    (MLA, lambda c: bool(re.search(r"deepseek|dsv3|moonlight|kimi|glm-5", _model(c)))),
    (DSA, lambda c: "glm-5" in _model(c)),
    (GATED_DELTANET, lambda c: bool(re.search(r"qwen3\.5|qwen3_5|qwen3-next", _model(c)))),
    (GPT_OSS, lambda c: "gpt-oss" in _model(c)),
)


def _family(config: dict[str, Any], family: Part) -> bool:
    return any(used(config) for part, used in FAMILY_RULES if part is family)


FEATURE_RULES: tuple[tuple[Part, Callable[[dict[str, Any]], bool]], ...] = (
    (MOE, lambda c: _moe(c)),
    (MOE_IN_HYBRID, lambda c: _moe(c) and _family(c, HYBRID)),
    (MOE_IN_GATED_DELTANET, lambda c: _moe(c) and _family(c, GATED_DELTANET)),
    (MTP, lambda c: int(_get(c, "policy.megatron_cfg.mtp_num_layers", 0) or 0) > 0),
    (LORA, lambda c: bool(_get(c, "policy.megatron_cfg.peft.enabled", False))),
    (FP8, lambda c: bool(_get(c, "policy.megatron_cfg.fp8_cfg.enabled", False))),
    (MODELOPT, lambda c: bool(_get(c, "policy.quant_cfg"))),
    (FUSED_LOGPROBS, lambda c: bool(_get(c, "policy.megatron_cfg.use_fused_linear_logprobs"))),
    (EAGLE3, lambda c: bool(_get(c, "policy.draft.enabled", False))),
    (MEGATRON_GENERATION, lambda c: _get(c, "policy.generation.backend") == "megatron"),
    (
        MOONCAKE,
        lambda c: (
            bool(_get(c, "data_plane.enabled", False))
            and "mooncake" in str(_get(c, "data_plane.backend", ""))
        ),
    ),
    (
        CUDA_GRAPHS,
        lambda c: str(_get(c, "policy.megatron_cfg.cuda_graph_impl", "none") or "none") != "none",
    ),
)


def parts_of(config: dict[str, Any]) -> list[Part]:
    """The recipe's model family (GPTModel when no other matches) and its features, in order."""
    families = [part for part, used in FAMILY_RULES if used(config)]
    features = [part for part, used in FEATURE_RULES if used(config)]
    return (families or [DENSE]) + features


def not_run(config: dict[str, Any]) -> list[str]:
    """`<name>: <why>` for each family or feature of the recipe CLIPO has not run with."""
    return [f"{p.name}: {p.why_not}" for p in parts_of(config) if not p.ran]


def record(config: dict[str, Any]) -> str:
    """The verdict table's cell: each part with a check mark (ran, and where) or a cross."""
    return "; ".join(
        f"{p.name} ✓ ({p.ran_in.split('::')[0].rsplit('/', 1)[-1]})" if p.ran_in else f"{p.name} ✗"
        for p in parts_of(config)
    )


def markdown_table() -> str:
    """The record as docs/nemo_rl.md shows it (a test holds the doc to this)."""
    rows = ["| family or feature | CLIPO has run with it | the test, or why not |", "|---|---|---|"]
    for part in [DENSE] + [p for p, _ in FAMILY_RULES + FEATURE_RULES]:
        tests = ", ".join(f"`{t.strip()}`" for t in (part.ran_in or "").split(",") if t.strip())
        rows.append(f"| {part.name} | {'yes' if part.ran else 'no'} | {tests or part.why_not} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
