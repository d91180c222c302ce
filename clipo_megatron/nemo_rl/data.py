# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL dataset processors and verifiable rewards with the paper's prompts (App. "Prompt Construction").

Prompt(q, d) = q + "\\n" + Instruction(d), one `user` message, no system
prompt, then the tokenizer's chat template with the generation prompt.
Rewards: 1 if the last `\\boxed{}` answer matches the ground truth
(math-verify for math, letter match for multiple choice), else 0.

The verifier and instruction strings come from `clipo_megatron.verify` and
`clipo_megatron.data.templates`; this module wraps them in
NeMo-RL's processor signature
`(datum_dict, task_data_spec, tokenizer, max_seq_length, idx) -> DatumSpec`
and registers them (`register_with_nemo_rl`). Plain Python: tests call the
processors with a real tokenizer and no NeMo-RL.
"""

from __future__ import annotations

import functools
from typing import Any

from clipo_megatron.data import templates
from clipo_megatron.data.registry import get_spec
from clipo_megatron.data.templates import build_prompt, instruction_for
from clipo_megatron.verify.extract import clean_answer

MATH_INSTRUCTION = templates.MATH
__all__ = ["build_prompt", "instruction_for", "clipo_data_processor", "score", "score_batch"]


def kind_of(dataset: str) -> str:
    """The reward kind of a dataset (name or alias), from the data registry: "math" or "mc"."""
    return get_spec(dataset).kind


def _text(x: Any) -> str:
    """A message content, a verl `prompt` (list of one user message) or a plain string."""
    if isinstance(x, dict):
        return _text(x.get("content", x.get("ground_truth", "")))
    if isinstance(x, list | tuple) or type(x).__name__ == "ndarray":
        return _text(list(x)[-1]) if len(x) else ""
    return str(x)


def _ground_truth(x: Any) -> str:
    """verl `reward_model` dicts carry `ground_truth`; the answer rule is the data layer's
    (GSM8K `#### 1,234` -> 1234, a full solution -> its last box)."""
    gt = x["ground_truth"] if isinstance(x, dict) and "ground_truth" in x else _text(x)
    return clean_answer(gt)


def _problem_and_answer(
    datum: dict[str, Any], input_key: str | None, output_key: str | None
) -> tuple[str, str]:
    """(problem, ground truth) from NeMo-RL's ResponseDataset layout, the authors' verl parquet or flat keys."""
    if "messages" in datum:  # NeMo-RL ResponseDataset layout: [user problem, assistant answer]
        msgs = datum["messages"]
        return _text(msgs[0]), _ground_truth(msgs[1])
    if "prompt" in datum and "reward_model" in datum:  # the authors' verl parquet (data/README.md)
        return _text(datum["prompt"]), _ground_truth(datum["reward_model"])
    for p, a in ((input_key, output_key), ("problem", "answer"), ("question", "answer")):
        if p and a and p in datum and a in datum:
            return _text(datum[p]), _ground_truth(datum[a])
    raise ValueError(
        f"datum has neither 'messages', verl 'prompt'/'reward_model' nor a known (problem, answer) "
        f"key pair: keys {sorted(datum)}"
    )


def clipo_data_processor(
    datum_dict: dict[str, Any],
    task_data_spec: Any,
    tokenizer: Any,
    max_seq_length: int,
    idx: int,
    *,
    dataset: str = "gsm8k",
    input_key: str | None = None,
    output_key: str | None = None,
) -> dict[str, Any]:
    """NeMo-RL TaskDataProcessFn: the paper's prompt; ground truth into `extra_env_info`.

    A prompt over `max_seq_length` tokens is truncated and masked (loss_multiplier 0), as
    NeMo-RL's math processors do; one of exactly `max_seq_length` fits (verl keeps `<=`), so
    with `clipo.drop_overlong_prompts` every row left is trained on (nemo_rl/prompt_filter.py).
    """
    problem, answer = _problem_and_answer(datum_dict, input_key, output_key)
    messages = [{"role": "user", "content": build_prompt(problem, dataset)}]
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, add_special_tokens=False
    )
    token_ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"][0]
    length = int(token_ids.shape[0])
    loss_multiplier = 1.0
    if length > max_seq_length:
        token_ids = token_ids[: min(4, max_seq_length)]
        loss_multiplier = 0.0
    return {
        "message_log": [{"role": "user", "content": text, "token_ids": token_ids}],
        "length": length,
        "extra_env_info": {"ground_truth": answer, "clipo_kind": kind_of(dataset)},
        "loss_multiplier": loss_multiplier,
        "idx": idx,
        "task_name": datum_dict.get(
            "task_name", getattr(task_data_spec, "task_name", None) or "math"
        ),
    }


PROCESSORS = {
    f"clipo_{name}": functools.partial(clipo_data_processor, dataset=name)
    for name in ("gsm8k", "math", "mmlu", "truthfulqa", "commonsenseqa")
}


# ----------------------------------------------------------------------------- rewards


def score(response: str, ground_truth: str, kind: str = "math") -> float:
    """The verifiable reward of one response (call in a worker process: math-verify uses signals).

    kind "mc": the last boxed option letter against the ground truth; "math": math-verify."""
    if kind == "mc":
        from clipo_megatron.verify.choice import verify_choice

        return verify_choice(response, ground_truth)
    if kind != "math":
        raise ValueError(f"unknown reward kind {kind!r}; expected 'math' or 'mc'")
    from clipo_megatron.verify.math import verify_math

    return verify_math(response, ground_truth)


def score_batch(
    responses: list[str], ground_truths: list[str], kinds: list[str] | None = None
) -> list[float]:
    if len(responses) != len(ground_truths) or (kinds is not None and len(kinds) != len(responses)):
        raise ValueError(
            f"{len(responses)} responses, {len(ground_truths)} ground truths, "
            f"{None if kinds is None else len(kinds)} kinds"
        )
    kinds = kinds or ["math"] * len(responses)
    return [score(r, g, k) for r, g, k in zip(responses, ground_truths, kinds)]


ENV_NAME = "clipo_math"
ENV_ACTOR_FQN = "clipo_megatron.nemo_rl.environment.ClipoMathEnvironment"


def register_with_nemo_rl() -> None:
    """Register the processors and the environment in NeMo-RL's registries (idempotent)."""
    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    from nemo_rl.data.processors import PROCESSOR_REGISTRY, register_processor
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES
    from nemo_rl.environments.utils import ENV_REGISTRY

    for name, fn in PROCESSORS.items():
        if name not in PROCESSOR_REGISTRY:
            register_processor(name, fn)
    ENV_REGISTRY.setdefault(ENV_NAME, {"actor_class_fqn": ENV_ACTOR_FQN})
    ACTOR_ENVIRONMENT_REGISTRY.setdefault(ENV_ACTOR_FQN, PY_EXECUTABLES.SYSTEM)
