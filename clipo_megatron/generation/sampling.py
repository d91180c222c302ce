# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every sampling parameter a generation uses, pinned, so a model's generation_config never applies.

A model directory may ship a `generation_config.json` (Qwen2.5-Instruct: top_k 20,
top_p 0.8, repetition_penalty 1.05, temperature 0.7). HF `generate` merges it into every
call: any knob the caller leaves at transformers' global default is replaced by the model's
value (a `GenerationConfig` passed in is merged the same way; explicit keyword arguments are
applied after the merge). vLLM's offline `LLM` uses it for default sampling parameters.
Each backend therefore passes *every* knob below explicitly (`hf_kwargs`, `vllm_kwargs`),
neutral values included, and the evaluation records them with its scores.

temperature 0 means greedy decoding (the authors' Track I evaluation, `do_sample=False`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0  # 1: off
    top_k: int = 0  # 0: off
    min_p: float = 0.0  # 0: off
    repetition_penalty: float = 1.0  # 1: off (HF / vLLM multiplicative penalty)

    def __post_init__(self) -> None:
        bad = []
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            bad.append(f"temperature={self.temperature} must be >= 0 (0: greedy)")
        if not 0 < self.top_p <= 1:
            bad.append(f"top_p={self.top_p} must be in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            bad.append(f"top_k={self.top_k!r} must be an int >= 0 (0: off)")
        if not 0 <= self.min_p <= 1:
            bad.append(f"min_p={self.min_p} must be in [0, 1] (0: off)")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            bad.append(f"repetition_penalty={self.repetition_penalty} must be > 0 (1: off)")
        if bad:
            raise ValueError("sampling: " + "; ".join(bad))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def hf_kwargs(self) -> dict[str, object]:
        """Keyword arguments for HF `generate`: every logits processor / warper a
        generation_config can switch on, pinned (greedy leaves the warpers off, not the penalty)."""
        kw: dict[str, object] = {
            "do_sample": not self.greedy,
            "num_beams": 1,
            "repetition_penalty": self.repetition_penalty,
            "no_repeat_ngram_size": 0,
            "min_new_tokens": None,
            "min_length": 0,
        }
        if self.greedy:  # transformers warns about sampling knobs set for greedy decoding
            kw.update(temperature=None, top_p=None, top_k=None, min_p=None, typical_p=None)
        else:
            kw.update(
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=self.top_k,
                min_p=self.min_p or None,
                typical_p=1.0,
                epsilon_cutoff=0.0,
                eta_cutoff=0.0,
            )
        return kw

    def vllm_kwargs(self) -> dict[str, object]:
        """Keyword arguments for vLLM's `SamplingParams` (greedy: temperature 0)."""
        return {
            "temperature": self.temperature,
            "top_p": 1.0 if self.greedy else self.top_p,
            "top_k": 0 if self.greedy else self.top_k,
            "min_p": 0.0 if self.greedy else self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
        }
