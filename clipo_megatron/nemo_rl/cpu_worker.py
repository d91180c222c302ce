# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A CPU policy worker in NeMo-RL's worker protocol, for running NeMo-RL's real GRPO loop on CPU.

NeMo-RL's `MegatronPolicyWorker` cannot be built without a GPU
(Megatron-Bridge, TransformerEngine, `torch.cuda.set_device`, NCCL, CUDA
tensors). Everything around it can: `Policy`, `RayWorkerGroup` on a
`RayVirtualCluster(use_gpus=False)`, `MegatronGeneration(policy=...)` and
`grpo_train`. This worker stands in for the GPU worker with the same method
names and keyword-only calls, over this project's Megatron-Core CPU policy
(`megatron.model_builder` + `models.hf_convert`, the runner's model) and its
passes (`megatron.policy_passes`, the runner's logprob pass and sampler):

- `get_logprobs(data=)` reads its microbatches from this module's
  `get_microbatch_iterator`, which *is* NeMo-RL's
  (`nemo_rl.models.megatron.data`), looked up at call time as in
  `megatron_policy_worker`; the CLIPO mixin tees it and hooks the final norm,
  exactly as on the GPU. With `policy.sequence_packing.enabled` (the recipes)
  the microbatches are NeMo-RL's packed streams, run as the GPU's THD layout
  (`cpu_microbatches`: one row, block-diagonal causal mask);
- `train(data=, loss_fn=, gbs=, mbs=)` follows `MegatronPolicyWorker.train`
  step for step (`cpu_train.train_global_batches`), over the same NeMo-RL
  microbatches (packed when the recipe packs);
- `generate(data=, greedy=)` samples on the same weights (colocated
  generation: nothing to refit), seeded from the prompt tokens so a resumed
  run samples what the uninterrupted run sampled;
- `save_checkpoint` / construction with `weights_path` + `optimizer_path`
  restore model, reference model and optimizer exactly.

Only TP = PP = CP = 1 here (DP >= 1 over gloo); the parallel layouts are
proved by the gloo equivalence tests in tests/megatron/.
"""

from __future__ import annotations

import os
import sys
import zlib
from typing import Any

import torch

from clipo_megatron.megatron.policy_passes import sample
from clipo_megatron.models.hf_convert import load_megatron_state
from clipo_megatron.nemo_rl.cpu_microbatches import (
    ensure_megatron_bridge_stub,
    host_device_moves,
    microbatch_logprobs,
    nemo_rl_microbatches,
)
from clipo_megatron.nemo_rl.cpu_train import train_global_batches
from clipo_megatron.nemo_rl.worker import ClipoWorkerMixin

ensure_megatron_bridge_stub()
from nemo_rl.models.megatron.data import get_microbatch_iterator  # noqa: E402  (the pooler's seam)

CPU_WORKER_FQN = "clipo_megatron.nemo_rl.cpu_worker.ClipoCpuPolicyWorker"
__all__ = ["CPU_WORKER_FQN", "ClipoCpuPolicyWorker", "get_microbatch_iterator"]


class CpuMegatronPolicyWorkerImpl:
    """The policy worker protocol over a Megatron-Core GPTModel on CPU (TP = PP = CP = 1)."""

    def __init__(
        self,
        config: dict,
        tokenizer=None,
        weights_path: str | None = None,
        optimizer_path: str | None = None,
        init_optimizer: bool = True,
        init_reference_model: bool = True,
        **_: Any,
    ):
        from clipo_megatron.megatron.cpu_shims import enable_cpu_shims
        from clipo_megatron.megatron.model_builder import policy_from_hf
        from clipo_megatron.megatron.parallel import (
            data_parallel_group,
            ensure_model_parallel,
            tensor_parallel_group,
        )

        torch.set_num_threads(int(os.environ.get("CLIPO_CPU_WORKER_THREADS", "1")))
        mcfg = config["megatron_cfg"]
        sizes = [mcfg[k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size")]
        sizes.append(mcfg.get("context_parallel_size", 1))
        if sizes != [1, 1, 1]:
            raise ValueError(f"the CPU policy worker runs TP = PP = CP = 1 only, got {sizes}")
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo")  # RANK / WORLD_SIZE / MASTER_* from Ray
        enable_cpu_shims()
        ensure_model_parallel(1, 1)
        self.cfg = config
        self.tokenizer = tokenizer
        self.dp_group = data_parallel_group()
        self.tp_group = tensor_parallel_group()
        self.rank = torch.distributed.get_rank()

        import transformers

        torch.manual_seed(int(config.get("seed", 0)))
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            config["model_name"], dtype=torch.float32
        )
        self.model, self.arch = policy_from_hf(hf)  # the runner's policy builder
        del hf
        self.generate_calls = 0
        self.packed_streams = 0  # packed microbatches run (the contract suite checks packing ran)
        if weights_path:
            load_megatron_state(self.model, _load(weights_path, "model.pt"))
            self.generate_calls = _load(weights_path, "generation.pt")["generate_calls"]
        # The reference policy: the weights the run started from (NeMo-RL keeps it beside the policy).
        self.reference_state = self._tensors() if init_reference_model else None
        if weights_path and init_reference_model:
            self.reference_state = _load(weights_path, "reference.pt")
        opt = mcfg["optimizer"]
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=float(opt["lr"]),
            weight_decay=float(opt.get("weight_decay", 0.0)),
            betas=(float(opt.get("adam_beta1", 0.9)), float(opt.get("adam_beta2", 0.999))),
            eps=float(opt.get("adam_eps", 1e-8)),
        )
        self.clip_grad = float(opt.get("clip_grad", 0.0) or 0.0)
        if optimizer_path and init_optimizer:
            self.optimizer.load_state_dict(_load(optimizer_path, "optim.pt"))

    def _tensors(self) -> dict[str, torch.Tensor]:
        """The model's weights without `_extra_state` (TE metadata, None on CPU), cloned."""
        return {
            k: v.detach().clone()
            for k, v in self.model.state_dict().items()
            if not k.endswith("_extra_state")
        }

    # ---- what NeMo-RL's RayWorkerGroup / Policy call ---------------------------------------
    def is_alive(self) -> bool:
        return True

    def _clipo_model_config(self):
        return self.model.config

    def get_logprobs(self, *, data, micro_batch_size: int | None = None):
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        mbs = micro_batch_size or self.cfg["logprob_batch_size"]
        self.model.eval()
        out = []
        with torch.no_grad(), host_device_moves():
            it, seq_len = nemo_rl_microbatches(sys.modules[__name__], data, self.cfg, mbs)
            for mb in it:  # NeMo-RL's ProcessedMicrobatch, packed or padded
                self.packed_streams += mb.cu_seqlens_padded is not None
                lp = microbatch_logprobs(self.model, mb, tp_group=self.tp_group)  # [b, S]
                out.append(torch.nn.functional.pad(lp, (0, seq_len - lp.shape[1])))
        return BatchedDataDict({"logprobs": torch.cat(out)})

    def packed_stream_count(self) -> int:
        """Packed logprob microbatches run so far (NeMo-RL's packing really reached the model)."""
        return self.packed_streams

    def get_reference_policy_logprobs(self, *, data, micro_batch_size: int | None = None):
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        if self.reference_state is None:
            raise RuntimeError("the policy was built with init_reference_model=False")
        current = self._tensors()
        load_megatron_state(self.model, self.reference_state)
        try:
            lp = CpuMegatronPolicyWorkerImpl.get_logprobs(
                self, data=data, micro_batch_size=micro_batch_size
            )
        finally:
            load_megatron_state(self.model, current)
        return BatchedDataDict({"reference_logprobs": lp["logprobs"]})

    def train(self, *, data, loss_fn, eval_mode=False, gbs=None, mbs=None, **_: Any):
        """NeMo-RL's Megatron `train`, step for step, on CPU (`cpu_train.train_global_batches`)."""

        def microbatches(batch, micro_batch_size: int):
            with host_device_moves():
                it, _ = nemo_rl_microbatches(
                    sys.modules[__name__], batch, self.cfg, micro_batch_size
                )
                for mb in it:
                    yield mb.data_dict, microbatch_logprobs(self.model, mb, tp_group=self.tp_group)

        out = train_global_batches(
            self.model,
            self.optimizer,
            data,
            loss_fn,
            microbatches,
            dp_group=self.dp_group,
            gbs=gbs or self.cfg["train_global_batch_size"],
            mbs=mbs or self.cfg["train_micro_batch_size"],
            eval_mode=eval_mode,
            clip_grad=self.clip_grad,
        )
        return {**out, "rank": self.rank, "gpu_name": "cpu", "model_dtype": torch.float32}

    def generate(self, *, data, greedy: bool = False):
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        gen = self.cfg["generation"]
        ids = data["input_ids"]
        # Seeded per call (a counter saved with the weights) and prompt: a resumed run samples
        # exactly what the uninterrupted run sampled, and repeated prompts still differ.
        self.generate_calls += 1
        seed = zlib.crc32(ids.numpy().tobytes() + self.generate_calls.to_bytes(8, "little"))
        out = sample(
            self.model,
            ids,
            data["input_lengths"],
            max_new_tokens=int(gen["max_new_tokens"]),
            stop_token_ids=list(gen.get("stop_token_ids") or [self.tokenizer.eos_token_id]),
            pad_id=self.tokenizer.pad_token_id,
            temperature=float(gen.get("temperature", 1.0)),
            top_k=gen.get("top_k"),
            greedy=greedy,
            generator=torch.Generator().manual_seed(seed),
        )
        return BatchedDataDict(out)

    def generate_async(self, *, data, greedy: bool = False):
        """Main's Megatron generation always streams (`MegatronGeneration.generate_async`):
        one (row index, one-row batch) per sample, the GPU worker's streaming contract."""
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        out = self.generate(data=data, greedy=greedy)
        for i in range(out["output_ids"].shape[0]):
            yield i, BatchedDataDict({k: v[i : i + 1] for k, v in out.items()})

    def save_checkpoint(self, *, weights_path: str, optimizer_path=None, tokenizer_path=None, **_):
        if self.rank == 0:  # DP replicas hold identical weights and optimizer state
            _save(self._tensors(), weights_path, "model.pt")
            _save({"generate_calls": self.generate_calls}, weights_path, "generation.pt")
            if self.reference_state is not None:
                _save(self.reference_state, weights_path, "reference.pt")
            if optimizer_path:
                _save(self.optimizer.state_dict(), optimizer_path, "optim.pt")
            if tokenizer_path and self.tokenizer is not None:
                self.tokenizer.save_pretrained(tokenizer_path)
        torch.distributed.barrier()

    # Phases of a colocated GPU worker (memory moves, engines) have nothing to do on CPU.
    def _noop(self, *_: Any, **__: Any) -> bool:
        return True

    prepare_for_generation = finish_generation = prepare_for_training = finish_training = _noop
    prepare_for_lp_inference = finish_inference = offload_before_refit = _noop
    offload_after_refit = invalidate_kv_cache = finalize_async_save = _noop
    start_gpu_profiling = stop_gpu_profiling = _noop

    def shutdown(self) -> bool:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        return True


def _save(obj, directory: str, name: str) -> None:
    os.makedirs(directory, exist_ok=True)
    torch.save(obj, os.path.join(directory, name))


def _load(directory: str, name: str):
    from clipo_megatron.core.safe_load import load_state

    return load_state(os.path.join(directory, name))  # weights only (core/safe_load.py)


class ClipoCpuPolicyWorkerImpl(ClipoWorkerMixin, CpuMegatronPolicyWorkerImpl):
    """The CPU worker + the same CLIPO worker mixin the GPU extension uses."""

    _clipo_iterator_module = sys.modules[__name__]


try:  # the Ray actor class NeMo-RL's RayWorkerBuilder instantiates (CPU_WORKER_FQN)
    import ray
except ImportError:  # pragma: no cover - Ray comes with NeMo-RL
    ClipoCpuPolicyWorker = None
else:
    ClipoCpuPolicyWorker = ray.remote(ClipoCpuPolicyWorkerImpl)
