# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The Ray actor NeMo-RL's `RayWorkerGroup` builds for the real-worker `grpo_train` run (test code).

`RealCpuPolicyWorkerImpl` is the product's `ClipoMegatronPolicyWorkerImpl` (NeMo-RL's real worker +
the CLIPO mixin) with the checks' reads (`inspection.InspectionMixin`) and, in the actor process
only: the TE import stub, `cpu_patches` (entered for the actor's life), the CPU layer spec through the worker's `_transformer_layer_spec` hook. Generation
is what cannot run on CPU (`MegatronGenerationMixin`: Megatron-Core's dynamic engine, flashinfer,
NCCL refit): it is the runner's seeded sampler (`runner.model.policy_passes.sample`) over the worker's
own model (colocated: nothing to refit), and the engine's phase calls are no-ops.
"""

from __future__ import annotations

import functools
import os
import zlib
from typing import Any

import torch

from clipo_testkit.nemo_rl.real_worker.te_stub import import_bridge

import_bridge()

from clipo_megatron.nemo_rl.worker_extension import ClipoMegatronPolicyWorkerImpl  # noqa: E402
from clipo_megatron.runner.model.policy_passes import sample  # noqa: E402
from clipo_testkit.nemo_rl.inspection import InspectionMixin  # noqa: E402
from clipo_testkit.nemo_rl.real_worker.cpu_patches import EMULATED, cpu_worker_patches  # noqa: E402
from clipo_testkit.nemo_rl.real_worker.thd_attention import cpu_thd_layer_spec  # noqa: E402
from clipo_testkit.nemo_rl.real_worker.tp_generation import TPGenerationFollowers  # noqa: E402

REAL_WORKER_FQN = "clipo_testkit.nemo_rl.real_worker.ray_worker.RealCpuPolicyWorker"
_GENERATION = "generation.pt"


class _FullVocabModel:
    """The worker's model as the sampler wants it: full-vocabulary logits on every TP rank. Under
    TP the output layer returns this rank's vocabulary slice (Megatron's `parallel_output`), so the
    slices are all-gathered over TP; under sequence parallelism the sequence is padded to a
    multiple of TP (right padding: a causal model's logits before it do not change). Every TP rank
    samples with the same seeded generator from the same logits: the same tokens."""

    def __init__(self, model, config):
        self.model, self.config = model, config

    def eval(self):
        self.model.eval()
        return self

    def __call__(self, ids, pos, mask):
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

        tp = parallel_state.get_tensor_model_parallel_world_size()
        s = ids.shape[1]
        pad = (-s) % tp if self.config.sequence_parallel else 0
        if pad:
            ids = torch.nn.functional.pad(ids, (0, pad))
            pos = torch.arange(s + pad).expand(ids.shape[0], s + pad)
            mask = torch.triu(torch.ones(s + pad, s + pad, dtype=torch.bool), 1).view(
                1, 1, s + pad, s + pad
            )
        dev = next(self.model.parameters()).device  # the emulated device, or the host
        logits = self.model(ids.to(dev), pos.to(dev), mask.to(dev))[:, :s]  # [B, s, V / tp]
        logits = gather_from_tensor_model_parallel_region(logits) if tp > 1 else logits
        return logits.cpu()  # the sampler is host code


class RealCpuPolicyWorkerImpl(InspectionMixin, ClipoMegatronPolicyWorkerImpl):
    _transformer_layer_spec = staticmethod(cpu_thd_layer_spec)

    def __init__(self, config, tokenizer, weights_path=None, optimizer_path=None, *a, **k):
        torch.set_num_threads(int(os.environ.get("CLIPO_CPU_WORKER_THREADS", "1")))
        rank = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
        # EMULATED=1 (the test's environment, which NeMo-RL hands its actors): CUDA's device rules
        self.emulated = os.environ.get(EMULATED) == "1"
        self._patches = cpu_worker_patches(rank, emulated=self.emulated)
        self._patches.__enter__()  # for the actor's life
        super().__init__(config, tokenizer, weights_path, optimizer_path, *a, **k)
        self._followers = TPGenerationFollowers()  # collective: every rank, in __init__
        self.generate_calls, self.packed_streams = 0, 0
        if weights_path and os.path.exists(os.path.join(weights_path, _GENERATION)):
            self.generate_calls = torch.load(os.path.join(weights_path, _GENERATION))["calls"]

    # ---- generation: the CPU sampler over this worker's model (colocated: nothing to refit)
    def generate(self, *, data, greedy: bool = False):
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        gen = self.cfg["generation"]
        ids = data["input_ids"]
        # Seeded per call (a counter saved with the weights) and prompt: a resumed run samples
        # exactly what the uninterrupted run sampled, and repeated prompts still differ.
        self.generate_calls += 1
        seed = zlib.crc32(ids.numpy().tobytes() + self.generate_calls.to_bytes(8, "little"))
        self.model.eval()
        if self.megatron_cfg.model.pipeline_model_parallel_size > 1:
            raise RuntimeError("the CPU sampler runs TP (and DP) layouts only, not PP")
        with torch.no_grad():
            out = sample(
                self._followers.leader_model(self._full_vocab_model()),
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
        out = self.generate(data=data, greedy=greedy)
        for i in range(out["output_ids"].shape[0]):
            yield i, type(out)({k: v[i : i + 1] for k, v in out.items()})

    def _full_vocab_model(self) -> _FullVocabModel:
        return _FullVocabModel(self.model, self.megatron_cfg.model)

    def prepare_for_generation(self, *_: Any, **__: Any) -> bool:
        """The engine's start: TP followers of worker 0 serve its forwards (tp_generation)."""
        self.model.eval()
        self._followers.start(self._full_vocab_model)
        return True

    def finish_generation(self, *_: Any, **__: Any) -> bool:
        self._followers.stop()
        return True

    def _noop(self, *_: Any, **__: Any) -> bool:
        return True

    invalidate_kv_cache = _noop
    suspend_for_refit = resume_after_refit = offload_before_refit = offload_after_refit = _noop

    # The inference engine's coroutines (MegatronGenerationMixin, CUDA-only) go: with any `async
    # def` left on the class Ray makes the actor an async actor, which runs calls in no guaranteed
    # order, and NeMo-RL's async rollout sends one generate_async per sample, concurrently: rows of
    # a group reached the seeded sampler in another order on a resume and came back permuted
    # (found by the resume check: the same weights, the same samples, other rows). A sync actor
    # runs one caller's calls in the order sent.
    def _engine_only(self, *_: Any, **__: Any) -> None:
        raise RuntimeError("the Megatron inference engine is CUDA-only; not on the CPU worker")

    _generate_with_persistent_engine = _sleep_engine = _wake_engine = _engine_only
    _start_inference_coordinator = checkpoint_engine_rpc = _engine_only
    send_weights_via_checkpoint_engine = _engine_only

    # ---- what the contract suite reads besides NeMo-RL's protocol
    def get_logprobs(self, *, data, micro_batch_size=None, **kwargs):
        from nemo_rl.models.policy.workers import megatron_policy_worker as mpw

        original = mpw.get_microbatch_iterator

        def counted(*a, **k):
            it, *rest = original(*a, **k)

            def gen():
                for mb in it:
                    self.packed_streams += mb.cu_seqlens_padded is not None
                    yield mb

            return (gen(), *rest)

        mpw.get_microbatch_iterator = counted
        try:
            return super().get_logprobs(data=data, micro_batch_size=micro_batch_size, **kwargs)
        finally:
            mpw.get_microbatch_iterator = original

    def packed_stream_count(self) -> int:
        return self.packed_streams

    def save_checkpoint(self, weights_path: str, optimizer_path=None, **kwargs):
        super().save_checkpoint(weights_path=weights_path, optimizer_path=optimizer_path, **kwargs)
        if torch.distributed.get_rank() == 0:  # the sampler's counter: a resume samples the same
            torch.save({"calls": self.generate_calls}, os.path.join(weights_path, _GENERATION))
        torch.distributed.barrier()


def _in_device_mode(fn):
    """Ray runs actor methods on another thread than __init__, and torch's function modes are
    per thread: the host mapping of "cuda" (cpu_patches' device_literals), or the emulated CUDA's
    rules, is entered per call."""

    @functools.wraps(fn)
    def wrapped(self, *a, **k):
        from clipo_testkit.emulated_cuda import emulated_cuda_on_this_thread
        from clipo_testkit.nemo_rl.real_worker.backward_mode import _CudaToCpuThroughBackward

        with emulated_cuda_on_this_thread() if self.emulated else _CudaToCpuThroughBackward():
            return fn(self, *a, **k)

    return wrapped


for _name in (
    "generate",
    "get_logprobs",
    "get_reference_policy_logprobs",
    "get_logprobs_presharded",  # the TransferQueue loop's entry points (TQWorkerMixin)
    "get_reference_policy_logprobs_presharded",
    "train_presharded",
    "train",
    "save_checkpoint",
    "prepare_for_lp_inference",
    "prepare_for_training",
    "finish_training",
    "finish_inference",
    "clipo_setup",
    "clipo_head_step",
    "clipo_save_head",
    "clipo_load_head",
    "clipo_head_state",
    "clipo_last_pooled",
):
    if hasattr(RealCpuPolicyWorkerImpl, _name):
        setattr(
            RealCpuPolicyWorkerImpl,
            _name,
            _in_device_mode(getattr(RealCpuPolicyWorkerImpl, _name)),
        )

try:
    import ray
except ImportError:  # pragma: no cover
    RealCpuPolicyWorker = None
else:
    RealCpuPolicyWorker = ray.remote(RealCpuPolicyWorkerImpl)
