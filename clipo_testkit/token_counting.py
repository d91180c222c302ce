# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Count the tokens a generator actually computes: prompt (prefill) vs generated (decode)
(the test kit: tests and benchmarks count, the product never does).

Timings alone cannot show whether the G rollouts of a prompt share its prefill; these
counters read it off the engine itself (vLLM's scheduler) or off the model's forward
calls (HF), so tests and `bench/bench_generation.py` can assert the number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class TokenCount:
    prefill: int = 0  # prompt tokens run through the model (cache hits excluded)
    decode: int = 0  # generated tokens fed back
    cache_hits: int = 0  # prompt tokens served from vLLM's prefix cache
    steps: int = 0  # engine steps (vLLM) or forward calls (HF) that computed anything
    prefill_per_step: list[int] = field(default_factory=list)


class VLLMTokenCounter:
    """Wraps the in-process scheduler's `schedule()` for the duration of a `with` block.

    After `schedule()` a request's `num_computed_tokens` already includes this step's
    tokens, so the prompt part of step k is what falls below `num_prompt_tokens`.
    Needs the in-process engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, as VLLMGenerator sets).
    """

    def __init__(self, llm):
        self.sched = llm.llm_engine.engine_core.engine_core.scheduler
        self.count = TokenCount()

    def __enter__(self) -> TokenCount:
        orig = self.sched.schedule
        count = self.count

        def schedule(*args, **kwargs):
            out = orig(*args, **kwargs)
            count.cache_hits += sum(r.num_computed_tokens for r in out.scheduled_new_reqs)
            step_prefill = 0
            for rid, k in out.num_scheduled_tokens.items():
                req = self.sched.requests[rid]
                before = req.num_computed_tokens - k
                p = min(k, max(0, req.num_prompt_tokens - before))
                step_prefill += p
                count.decode += k - p
            count.prefill += step_prefill
            if out.total_num_scheduled_tokens:
                count.steps += 1
                count.prefill_per_step.append(step_prefill)
            return out

        self.sched.schedule = schedule
        return count

    def __exit__(self, *exc) -> None:
        del self.sched.schedule  # the instance attribute; the class method shows again


class HFTokenCounter:
    """Forward pre-hook on an HF causal LM: positions below `prompt_width` are prompt tokens.

    A call that brings s new positions on top of c cached ones computes positions c..c+s-1 for
    every row; those < `prompt_width` (the left-padded prompt width, padding included: the
    model computes it too) are prefill, the rest decode.
    """

    def __init__(self, model: torch.nn.Module, prompt_width: int):
        self.model = model
        self.width = prompt_width
        self.count = TokenCount()
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def __enter__(self) -> TokenCount:
        count, width = self.count, self.width

        def hook(_mod, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)  # [B, S]
            cache = kwargs.get("past_key_values")
            c = cache.get_seq_length() if cache is not None else 0
            b, s = ids.shape
            p = b * max(0, min(c + s, width) - c)
            count.prefill += p
            count.decode += b * s - p
            count.steps += 1
            count.prefill_per_step.append(p)

        self._handle = self.model.register_forward_pre_hook(hook, with_kwargs=True)
        return count

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()
