# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every CUDA / NCCL call on NeMo-RL's Megatron worker path, patched from outside, for a CPU run.

Test code only: the product (`clipo_megatron/nemo_rl/worker*.py`) and NeMo-RL / Megatron-Bridge /
Megatron-Core are not edited. Each `Patch` names the source line it stands in for; `check_sources()`
finds that line in the checkouts (NEMO_RL_SRC, BRIDGE_SRC, MEGATRON_LM_SRC) and fails with the patch
and file when an update moved it, so a patch never silently stops matching the code it replaces.

`cpu_worker_patches(local_rank)` applies them all for the duration of a `with` block (one process,
one rank; spawned processes apply their own).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

WORKER = "nemo_rl:models/policy/workers/megatron_policy_worker.py"
SETUP = "nemo_rl:models/megatron/setup.py"


@dataclass(frozen=True)
class Patch:
    name: str
    where: str  # "<root>:<path>", root in nemo_rl | bridge | mcore | mtraining
    line: str  # source text the patch stands in for (must occur in the file)
    reason: str


PATCHES = (
    Patch(
        "ray_gpu_ids",
        WORKER,
        "gpu_ids = ray.get_gpu_ids()",
        "no GPU in the actor: ray.get_gpu_ids() is [] -> [local rank]",
    ),
    Patch(
        "set_device",
        WORKER,
        "torch.cuda.set_device(local_rank)",
        "no device to select on a CPU build: a no-op",
    ),
    Patch(
        "current_device",
        WORKER,
        "assert torch.cuda.current_device() == local_rank",
        "the worker asserts the selected device; Megatron-Core places tensors on "
        "current_device(): the local rank, which the device-literal mode maps to the host",
    ),
    Patch(
        "device_literals",
        SETUP,
        '[state.start_time], dtype=torch.double, device="cuda"',
        'device="cuda" / .cuda() / .to("cuda") literals (worker, setup, data.py, train.py): '
        "onto the host (clipo_megatron.megatron.cpu_shims' mode)",
    ),
    Patch(
        "nccl_to_gloo",
        SETUP,
        'torch.distributed.init_process_group("nccl")',
        "NCCL needs GPUs: the worker's process group is gloo",
    ),
    Patch(
        "bridge_no_cuda",
        "bridge:training/initialize.py",
        'assert torch.cuda.is_available(), "Megatron requires CUDA."',
        "Bridge's initialize_megatron asserts CUDA unless allow_no_cuda; NeMo-RL does not pass it",
    ),
    Patch(
        "bridge_gloo_backend",
        "bridge:training/initialize.py",
        'dist_config.use_decentralized_pg or dist_config.distributed_backend == "nccl"',
        "with no CUDA device Bridge refuses the NCCL backend its DistributedInitConfig defaults to",
    ),
    Patch(
        "compile_helpers",
        "bridge:training/initialize.py",
        "compile_helpers()",
        "Bridge's initialize_megatron runs `make` in Megatron-Core's datasets folder (pybind11, a "
        "write into the checkout) and sys.exit(1)s on failure; NeMo-RL feeds its own batches, the "
        "dataset index helpers are never used: a no-op",
    ),
    Patch(
        "jit_warmup_emulated",
        "bridge:training/initialize.py",
        "_warmup_jit_function(model_config, micro_batch_size)",
        "emulated mode only: with torch.cuda.is_available() true Bridge warms up torch.compile'd "
        "fused kernels on 'cuda' and dynamo reads the CUDA stream, which the emulator has not; "
        "those fusions are off in this config (on the host mapping the warmup runs on CPU)",
    ),
    Patch(
        "cpu_provider",
        "nemo_rl:models/megatron/community_import.py",
        "model_provider = bridge.to_megatron_provider(load_weights=True)",
        "Bridge's GPT provider defaults to TransformerEngine's layer spec and fused kernels (RoPE, "
        "softmax, cross entropy, grad accumulation) that need CUDA: every provider AutoBridge "
        "hands NeMo-RL (HF import, setup_model_config) gets the CPU layer spec and no fusions",
    ),
    Patch(
        "rng_tracker_seed",
        "bridge:training/initialize.py",
        "if torch.cuda.device_count() > 0:",
        "Bridge seeds Megatron-Core's RNG tracker only when a CUDA device exists, and the layers' "
        "init forks it ('model-parallel-rng is not added'): seeded after Bridge's own seeding, "
        "with Megatron-Core's model_parallel_cuda_manual_seed",
    ),
    Patch(
        "streams",
        "mtraining:models/dist_utils.py",
        "ddp_stream = torch.cuda.Stream()",
        "DDP wrapping (and the worker's refit paths) run on a side CUDA stream: a stream object "
        "that waits for nothing, and a stream context that does nothing",
    ),
    Patch(
        "rng_state",
        "mcore:tensor_parallel/random.py",
        "orig_rng_state = torch.cuda.get_rng_state()",
        "the RNG tracker (model_parallel_cuda_manual_seed, Bridge's checkpoint rng state) reads "
        "the CUDA generator, which a CPU build lacks: a placeholder state (no op draws from it; "
        "seeding and setting a CUDA state are lazy calls that never run on CPU)",
    ),
    Patch(
        "no_op_cuda_calls",
        WORKER,
        "torch.cuda.get_device_name(",
        "synchronize / empty_cache / ipc_collect / reset_peak_memory_stats: nothing to wait "
        "for or free; get_device_name, memory stats and mem_get_info: host values",
    ),
    Patch(
        "tensor_type_strings",
        "mcore:optimizer/distrib_optimizer.py",
        "elif model_param.type() == 'torch.cuda.FloatTensor':",
        "Megatron-Core's optimizers (distributed, mixed precision) sort parameters by CUDA type "
        "strings: a host tensor's `type()` names its CUDA counterpart, as on the GPU it stands for",
    ),
    Patch(
        "sp_block_norm",
        "mcore:transformer/transformer_block.py",
        "LayerNormImpl = WrappedTorchNorm",
        "the block's final norm without TE or Apex is WrappedTorchNorm, which refuses sequence "
        "parallel: thd_attention.SequenceParallelTorchNorm, as the layers' norms",
    ),
    Patch(
        "torch_adam_step_state",
        "mcore:optimizer/distrib_optimizer.py",
        'steps = list(set([s["step"].item() for s in inner_state_dict["state"].values()]))',
        "without Apex or TE the distributed optimizer is torch Adam, whose state (and its 'step') "
        "appears at the first step; Megatron-Core's state_dict asserts one step over that state, "
        "so a resume (the fresh optimizer's sharded state dict is built before the load) fails: "
        "a fresh torch Adam's state is its zero state first (step 0, zero moments), what TE's "
        "FusedAdam holds on a GPU; the load overwrites it",
    ),
    Patch(
        "torch_adam_step_load",
        "mcore:optimizer/distrib_optimizer.py",
        '# Handle torch Adam "step" state separately.',
        "torch Adam keeps 'step' per parameter. On load Megatron-Core sets it from the param "
        "groups as one tensor shared by every parameter (torch Adam then adds 1 per parameter "
        "at each step: the bias correction runs ahead), and the dp_reshardable loader copies the "
        "fresh optimizer's per-parameter 'step' over it (the model-space loader skips 'step'): "
        "each parameter gets its own copy of the loaded step",
    ),
    Patch(
        "clip_grads_type",
        "mcore:optimizer/clip_grads.py",
        "assert param.grad.type() == 'torch.cuda.FloatTensor'",
        "Megatron-Core's grad clipping asserts the CUDA tensor type string: the same clipping "
        "(scale by max_norm / (norm + 1e-6) when < 1) without the type assert",
    ),
)


def _root(name: str) -> Path:
    env, inner = {
        "nemo_rl": ("NEMO_RL_SRC", "nemo_rl"),
        "bridge": ("BRIDGE_SRC", "src/megatron/bridge"),
        "mcore": ("MEGATRON_LM_SRC", "megatron/core"),
        "mtraining": ("MEGATRON_LM_SRC", "megatron/training"),
    }[name]
    return Path(os.environ[env]) / inner


class SeamMoved(AssertionError):
    pass


def locate(p: Patch) -> str:
    """'<file>:<line>' where the patched source line is; SeamMoved when it is gone."""
    root, rel = p.where.split(":", 1)
    path = _root(root) / rel
    if not path.exists():
        raise SeamMoved(
            f"patch {p.name}: {path} does not exist (was {p.where}); update cpu_patches"
        )
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if p.line in text:
            return f"{path}:{i}"
    raise SeamMoved(
        f"patch {p.name}: `{p.line}` is no longer in {path}: the code it stands in for moved; "
        "update tests/nemo_rl/real_worker/cpu_patches.py"
    )


def check_sources() -> dict[str, str]:
    """{patch name: file:line} for every patch (raises SeamMoved naming the first that moved)."""
    return {p.name: locate(p) for p in PATCHES}


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


def make_cpu_provider(provider):
    """A Bridge model provider set to build the CPU model: the project's CPU layer spec with THD
    attention (thd_attention.py), no fused kernels."""
    from tests.nemo_rl.real_worker.thd_attention import cpu_thd_layer_spec

    for key, value in CPU_PROVIDER_FIELDS.items():
        if hasattr(provider, key):
            setattr(provider, key, value)
    provider.transformer_layer_spec = cpu_thd_layer_spec
    return provider


class _NoStream:
    """A CUDA stream on a machine without one: nothing to wait for or record."""

    def __init__(self, *_a, **_k):
        pass

    def wait_stream(self, *_a, **_k):
        return None

    wait_event = record_event = synchronize = wait_stream


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


@contextlib.contextmanager
def cpu_worker_patches(local_rank: int = 0, *, emulated: bool = False) -> Iterator[None]:
    """Apply every patch in PATCHES (after checking each still matches its source line).

    emulated: instead of mapping "cuda" onto the host (`device_literals`), run under
    `testing.emulated_cuda` (CUDA's device rules on CPU; every collective on a group declared
    NCCL refuses host tensors): the worker's "cuda" tensors are tagged device tensors."""
    check_sources()
    stack = contextlib.ExitStack()
    if emulated:
        from clipo_megatron.testing.emulated_cuda import emulated_cuda

        # strict_order off: NeMo-RL's logprob backward (distributed/model_utils.py:197) scatter_adds
        # one chosen-token gradient per position -- unique indices, no atomic race on a GPU
        stack.enter_context(emulated_cuda(nccl_groups="all", strict_order=False))
    import megatron.core.optimizer.clip_grads as clip_grads
    import megatron.core.optimizer.optimizer as mcore_optimizer
    import ray
    from megatron.bridge import AutoBridge
    from nemo_rl.models.megatron import setup as nrl_setup

    from clipo_megatron.megatron.cpu_shims import _CudaToCpu

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

    register_allowed_target_prefix("tests.nemo_rl.real_worker.")
    import megatron.core.transformer.transformer_block as transformer_block

    from tests.nemo_rl.real_worker.thd_attention import SequenceParallelTorchNorm

    put(transformer_block, "LayerNormImpl", SequenceParallelTorchNorm)
    if not emulated:  # the emulated CUDA's tensors report CUDA type strings already
        put(torch.Tensor, "type", _cuda_type_string(torch.Tensor.type))
    import megatron.core.optimizer.distrib_optimizer as distrib_optimizer

    if not distrib_optimizer.HAVE_APEX_OR_TE:
        opt_cls = distrib_optimizer.DistributedOptimizer
        put(opt_cls, "state_dict", _with_torch_adam_zero_state(opt_cls.state_dict))
        set_states = opt_cls._set_main_param_and_optimizer_states
        put(opt_cls, "_set_main_param_and_optimizer_states", _keeping_torch_adam_step(set_states))
    for mod in (clip_grads, mcore_optimizer):
        if hasattr(mod, "clip_grad_by_total_norm_fp32"):
            put(mod, "clip_grad_by_total_norm_fp32", _cpu_clip_grad_by_total_norm_fp32)
    if not emulated:
        stack.enter_context(_CudaToCpu())
    try:
        with stack:
            yield
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)
