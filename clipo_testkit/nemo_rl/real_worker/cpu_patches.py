# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every CUDA / NCCL call on NeMo-RL's Megatron worker path, patched from outside, for a CPU run.

Test code only: the product (`clipo_megatron/nemo_rl/worker*.py`) and NeMo-RL / Megatron-Bridge /
Megatron-Core are not edited. Each patch names the source line it stands in for
(`patch_lines.PATCHES`, checked against the checkouts by `patch_lines.check_sources()`).

`cpu_worker_patches(local_rank)` applies them all for the duration of a `with` block (one process,
one rank; spawned processes apply their own).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

from clipo_testkit.nemo_rl.real_worker.patch_lines import check_sources


def _cpu_clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, use_decoupled_grad=False):
    """mcore's clip_grad_by_total_norm_fp32 without the CUDA type assert (same arithmetic)."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff < 1.0:
        for p in parameters:
            g = p.decoupled_grad if use_decoupled_grad else p.grad
            if g is not None:
                g.detach().mul_(clip_coeff)


CPU_PROVIDER_FIELDS = dict(
    apply_rope_fusion=False,
    masked_softmax_fusion=False,
    bias_activation_fusion=False,
    bias_dropout_fusion=False,
    cross_entropy_loss_fusion=False,
    gradient_accumulation_fusion=False,
    persist_layer_norm=False,
    use_cpu_initialization=True,
    # MoE (Bridge's MoE providers turn these on): TE's permutation kernel and grouped GEMM are GPU
    # kernels (SequentialMLP stands in, moe_model.py); the shared-expert overlap runs on a stream
    moe_permute_fusion=False,
    moe_grouped_gemm=False,
    moe_shared_expert_overlap=False,
)


def _with_torch_adam_zero_state(state_dict):
    """DistributedOptimizer.state_dict over a torch Adam that has not stepped (PATCHES)."""

    @functools.wraps(state_dict)
    def wrapped(self):
        inner = self.optimizer
        if isinstance(inner, torch.optim.Adam) and not inner.state:
            for group in inner.param_groups:
                for p in group["params"]:
                    inner.state[p] = {
                        "step": torch.tensor(0.0),
                        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                    }
        return state_dict(self)

    return wrapped


def _keeping_torch_adam_step(set_states):
    """DistributedOptimizer._set_main_param_and_optimizer_states without 'step' (PATCHES)."""

    @functools.wraps(set_states)
    def wrapped(self, model_param, tensors):
        if "step" in tensors:
            group_index, group_order = self.model_param_group_index_map[model_param]
            main = self.optimizer.param_groups[group_index]["params"][group_order]
            state = self.optimizer.state[main]
            state["step"] = state["step"].detach().clone()  # its own, not the shared one
            tensors = {**tensors, "step": state["step"]}
        return set_states(self, model_param, tensors)

    return wrapped


def _host_tensor_to_cpu(tensor, as_numpy: bool = False, record_stream: bool = False):
    """moe_utils.maybe_move_tensor_to_cpu with the host standing for the device (PATCHES)."""
    if torch.is_tensor(tensor):
        tensor = tensor.detach().to(torch.device("cpu"))
        return tensor.numpy() if as_numpy else tensor
    return tensor


def make_cpu_provider(provider):
    """A Bridge model provider set to build the CPU model: the project's CPU layer spec with THD
    attention (thd_attention.py), no fused kernels."""
    from clipo_testkit.nemo_rl.real_worker.thd_attention import cpu_thd_layer_spec

    for key, value in CPU_PROVIDER_FIELDS.items():
        if hasattr(provider, key):
            setattr(provider, key, value)
    provider.transformer_layer_spec = cpu_thd_layer_spec
    if type(provider).__name__ == "Qwen35VLModelProvider":  # its own spec builders: qwen35_model
        from clipo_testkit.nemo_rl.real_worker.qwen35_model import cpu_qwen35_provider

        cpu_qwen35_provider(provider)
    if hasattr(provider, "hybrid_stack_spec"):  # Nemotron-H: Bridge's HybridModelProvider
        from clipo_testkit.nemo_rl.real_worker.hybrid_model import cpu_hybrid_stack_spec

        provider.hybrid_stack_spec = cpu_hybrid_stack_spec
    return provider


class _NoStream:
    """A CUDA stream on a machine without one: nothing to wait for or record."""

    def __init__(self, *_a, **_k):
        pass

    def wait_stream(self, *_a, **_k):
        return None

    wait_event = synchronize = wait_stream

    def record_event(
        self, *_a, **_k
    ):  # MoE's alltoall dispatcher syncs on it (token_dispatcher.py)
        return _NoStream()

    query = lambda self: True  # noqa: E731 - an event that has happened


class _Props:
    name = "CPU"
    total_memory = 0
    major = minor = 0


def _cuda_type_string(original):
    @functools.wraps(original)
    def type_(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is not None or kwargs or self.device.type != "cpu":  # a conversion, or a device
            return original(self, dtype, non_blocking, **kwargs)
        name = original(self)  # under the device-literal mode this re-enters type_: once only
        return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)

    return type_


# "1" in an actor's environment: `grpo_train`'s actors run emulated (NeMo-RL hands them the
# driver's environment; `ray_worker.RealCpuPolicyWorkerImpl`)
EMULATED = "CLIPO_REAL_WORKER_EMULATED"


@contextlib.contextmanager
def cpu_worker_patches(local_rank: int = 0, *, emulated: bool = False) -> Iterator[None]:
    """Apply every patch in PATCHES (after checking each still matches its source line).

    emulated: instead of mapping "cuda" onto the host (`device_literals`), run under
    `clipo_testkit.emulated_cuda` (CUDA's device rules on CPU; every collective on a group declared
    NCCL refuses host tensors): the worker's "cuda" tensors are tagged device tensors."""
    check_sources()
    stack = contextlib.ExitStack()
    if emulated:
        from clipo_testkit.emulated_cuda import emulated_cuda

        # strict_order off: NeMo-RL's logprob backward (distributed/model_utils.py:197) scatter_adds
        # one chosen-token gradient per position -- unique indices, no atomic race on a GPU
        stack.enter_context(emulated_cuda(nccl_groups="all", strict_order=False))
    import megatron.core.optimizer.clip_grads as clip_grads
    import megatron.core.optimizer.optimizer as mcore_optimizer
    import ray
    from megatron.bridge import AutoBridge
    from nemo_rl.models.megatron import setup as nrl_setup

    from clipo_testkit.nemo_rl.real_worker.backward_mode import _CudaToCpuThroughBackward

    saved: list[tuple[object, str, object]] = []

    def put(obj, attr: str, value) -> None:
        saved.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, value)

    cuda = torch.cuda
    put(ray, "get_gpu_ids", lambda: [local_rank])
    put(cuda, "set_device", lambda *_a, **_k: None)
    put(cuda, "current_device", lambda: local_rank)
    for name in ("synchronize", "empty_cache", "ipc_collect", "reset_peak_memory_stats"):
        put(cuda, name, lambda *_a, **_k: None)
    put(cuda, "get_device_name", lambda *_a, **_k: "CPU")
    put(cuda, "get_device_properties", lambda *_a, **_k: _Props())
    for name in (
        "memory_allocated",
        "memory_reserved",
        "max_memory_allocated",
        "max_memory_reserved",
    ):
        put(cuda, name, lambda *_a, **_k: 0)
    put(cuda, "mem_get_info", lambda *_a, **_k: (0, 0))
    put(cuda, "Stream", _NoStream)
    put(cuda, "current_stream", lambda *_a, **_k: _NoStream())
    put(cuda, "stream", lambda *_a, **_k: contextlib.nullcontext())
    placeholder = torch.zeros(16, dtype=torch.uint8)
    put(cuda, "get_rng_state", lambda *_a, **_k: placeholder.clone())
    put(cuda.random, "get_rng_state", lambda *_a, **_k: placeholder.clone())
    put(cuda, "get_rng_state_all", lambda *_a, **_k: [placeholder.clone()])

    init_pg = torch.distributed.init_process_group

    @functools.wraps(init_pg)
    def gloo_init(backend=None, *a, **k):
        return init_pg("gloo" if backend in (None, "nccl") else backend, *a, **k)

    put(torch.distributed, "init_process_group", gloo_init)
    new_group = torch.distributed.new_group

    @functools.wraps(new_group)
    def gloo_new_group(*a, backend=None, **k):  # the data plane's replica group asks for NCCL
        return new_group(*a, backend="gloo" if backend == "nccl" else backend, **k)

    put(torch.distributed, "new_group", gloo_new_group)

    bridge_init = nrl_setup.initialize_megatron

    @functools.wraps(bridge_init)
    def initialize_megatron(*a, cfg, **k):
        cfg.dist.distributed_backend = "gloo"
        return bridge_init(*a, cfg=cfg, allow_no_cuda=True, **k)

    put(nrl_setup, "initialize_megatron", initialize_megatron)
    import megatron.bridge.training.initialize as bridge_initialize

    put(bridge_initialize, "compile_helpers", lambda: None)
    if emulated:
        put(bridge_initialize, "_warmup_jit_function", lambda *_a, **_k: None)
    set_seed = bridge_initialize._set_random_seed

    @functools.wraps(set_seed)
    def set_random_seed(seed_, *a, **k):
        set_seed(seed_, *a, **k)
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(seed_, force_reset_rng=True)

    put(bridge_initialize, "_set_random_seed", set_random_seed)

    to_provider = AutoBridge.to_megatron_provider

    @functools.wraps(to_provider)
    def cpu_provider(self, *a, **k):
        return make_cpu_provider(to_provider(self, *a, **k))

    put(AutoBridge, "to_megatron_provider", cpu_provider)
    # Bridge writes the provider (with our spec's import path) into run_config.yaml and instantiates
    # it back only from allowed module prefixes: its public registration, not a patch.
    from megatron.bridge.utils.instantiate_utils import register_allowed_target_prefix

    register_allowed_target_prefix("clipo_testkit.nemo_rl.real_worker.")
    import megatron.core.transformer.transformer_block as transformer_block

    from clipo_testkit.nemo_rl.real_worker.thd_attention import SequenceParallelTorchNorm

    put(transformer_block, "LayerNormImpl", SequenceParallelTorchNorm)
    import megatron.core.models.hybrid.hybrid_block as hybrid_block

    put(hybrid_block, "TENorm", SequenceParallelTorchNorm)  # HybridStack's final norm
    if not emulated:  # the emulated CUDA's tensors report CUDA type strings already
        put(torch.Tensor, "type", _cuda_type_string(torch.Tensor.type))
    import megatron.core.optimizer.distrib_optimizer as distrib_optimizer

    if not distrib_optimizer.HAVE_APEX_OR_TE:
        opt_cls = distrib_optimizer.DistributedOptimizer
        put(opt_cls, "state_dict", _with_torch_adam_zero_state(opt_cls.state_dict))
        set_states = opt_cls._set_main_param_and_optimizer_states
        put(opt_cls, "_set_main_param_and_optimizer_states", _keeping_torch_adam_step(set_states))
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import megatron.core.transformer.moe.token_dispatcher as token_dispatcher

    for mod in (moe_utils, token_dispatcher):
        put(mod, "maybe_move_tensor_to_cpu", _host_tensor_to_cpu)
    for mod in (clip_grads, mcore_optimizer):
        if hasattr(mod, "clip_grad_by_total_norm_fp32"):
            put(mod, "clip_grad_by_total_norm_fp32", _cpu_clip_grad_by_total_norm_fp32)
    if not emulated:
        stack.enter_context(_CudaToCpuThroughBackward())  # held inside autograd.backward too
    try:
        with stack:
            yield
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)
