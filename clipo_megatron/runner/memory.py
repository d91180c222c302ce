# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Does an accepted config fit the machine? An estimate of the memory its sizes scale, checked
against the memory there is before any model loads.

Every size key has a range (`runner/config.py` RANGES), but a range cannot know the machine:
`eval.size=100000` is in range and grew to 17.4 GB RSS in 117 s until the kernel's OOM killer
ended it (exit 137, no message; on a shared node it kills other jobs too). Now the held-out
evaluation is generated in bounded chunks (`EVAL_CHUNK_SEQUENCES` per call, whatever
`eval.size`), and what must be held at once is estimated here:

- the problem lists: data.train_size, eval.size and eval.perturbed_size x `PROBLEM_BYTES`;
- one step's rollouts, generated as one batch: rollout.prompts_per_step x rollout.n sequences,
  each holding its KV cache and a row of logits;
- one micro-batch's logits in the policy pass (train.micro_batch x tokens x vocab, x3: logits,
  log-softmax, gradient);
- one evaluation chunk.

`check_memory(cfg)` refuses, in one line naming the key of the largest term and the estimate,
a config whose estimate is over the machine's memory (`MemTotal`); the model's own weights
and optimiser state come on top and are not counted (they do not scale with these keys).
"""

from __future__ import annotations

from dataclasses import dataclass

# Bytes one generated arithmetic problem holds (a Record, its prompt and messages): measured
# 5.8 KB at 20,000 problems (ru_maxrss growth, reasoning-gym's import included); 8 KB covers it.
PROBLEM_BYTES = 8 * 1024
# Sequences per generate call of the held-out evaluation: its memory does not grow with eval.size.
EVAL_CHUNK_SEQUENCES = 256
PROMPT_TOKENS = 192  # the one-shot arithmetic prompt with its chat template is ~150 tokens
GiB = 2**30


@dataclass(frozen=True)
class Shape:
    """What a sequence of the policy costs per token: KV cache (fp32) and a row of logits."""

    layers: int
    kv_dim: int  # key / value heads x head dim
    vocab: int

    def kv_bytes(self) -> int:
        return self.layers * 2 * self.kv_dim * 4

    def logit_bytes(self) -> int:
        return self.vocab * 4


def model_shape(model) -> Shape:
    """SmolLM2-135M-Instruct (30 layers, 3 KV heads of 64, vocab 49,152) or the tiny model
    (`models/hf_policy.py`: 2 of 4 heads are KV heads, its tokenizer's vocab)."""
    if model.source == "tiny":
        return Shape(model.tiny_layers, model.tiny_hidden // 2, 49_152)
    return Shape(30, 3 * 64, 49_152)


def estimate(cfg) -> dict[str, int]:
    """Bytes per size key that scales them (the keys as the user writes them)."""
    shape = model_shape(cfg.model)

    # a generated sequence holds its KV cache per token and one row of logits (the next draw)
    def per_sequence(tokens: int) -> int:
        return tokens * shape.kv_bytes() + shape.logit_bytes()

    rollout_tokens = PROMPT_TOKENS + cfg.rollout.max_tokens
    eval_tokens = PROMPT_TOKENS + cfg.eval.max_tokens + 16  # the perturbed set's extra tokens
    return {
        "data.train_size": cfg.data.train_size * PROBLEM_BYTES,
        "eval.size": cfg.eval.size * PROBLEM_BYTES,
        "eval.perturbed_size": cfg.perturbed_eval_size() * PROBLEM_BYTES,
        "rollout.prompts_per_step x rollout.n": (
            cfg.rollout.prompts_per_step * cfg.rollout.n * per_sequence(rollout_tokens)
        ),
        "train.micro_batch": cfg.train.micro_batch * rollout_tokens * shape.logit_bytes() * 3,
        "eval.max_tokens": min(EVAL_CHUNK_SEQUENCES, max(1, cfg.eval.size) * cfg.eval.n)
        * per_sequence(eval_tokens),
    }


def available_bytes() -> int | None:
    """The machine's memory (MemTotal, /proc/meminfo; None where it cannot be read). Not
    MemAvailable: what other jobs hold now comes and goes, and a config is refused only when
    it cannot fit this machine at all."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(cfg) -> None:
    """ValueError (one line) when the estimate is over the memory available."""
    available = available_bytes()
    if available is None:
        return
    terms = estimate(cfg)
    total = sum(terms.values())
    if total <= available:
        return
    key = max(terms, key=lambda k: terms[k])
    raise ValueError(
        f"config: {key} = {_value(cfg, key)} needs about {terms[key] / GiB:.1f} GiB of memory "
        f"(the run about {total / GiB:.1f} GiB, weights aside), more than the "
        f"{available / GiB:.1f} GiB this machine has; lower {key.replace(' x ', ' or ')}"
    )


def _value(cfg, key: str) -> str:
    """The value(s) behind an estimate's key, as written: "3 x 16" for a product."""
    parts = []
    for dotted in key.split(" x "):
        node = cfg
        for attr in dotted.split("."):
            node = getattr(node, attr)
        parts.append(str(node))
    return " x ".join(parts)
