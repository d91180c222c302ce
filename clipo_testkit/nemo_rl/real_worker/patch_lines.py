# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The source lines `cpu_patches` stands in for, one `Patch` each, and the check that finds them.

Each `Patch` names the NeMo-RL / Megatron-Bridge / Megatron-Core line it replaces on a CPU run;
`check_sources()` finds that line in the checkouts (with `clipo_megatron.source_match`, the
reader the product's NeMo-RL seams use) (NEMO_RL_SRC, BRIDGE_SRC, MEGATRON_LM_SRC) and
fails with the patch and file when an update moved it, so a patch never silently stops matching
the code it replaces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

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
        "onto the host (clipo_megatron.runner.model.cpu_shims' mode)",
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
    Patch(
        "moe_splits_to_host",
        "mcore:transformer/moe/moe_utils.py",
        "if torch.is_tensor(tensor) and tensor.is_cuda:",
        "the MoE alltoall dispatcher copies its split sizes device -> host (numpy, as_numpy) for "
        "all_to_all_single; a host tensor is left as it is, and gloo's all_to_all_single refuses "
        "a tensor of split sizes: a host tensor takes the same path (the copy a no-op)",
    ),
    Patch(
        "backward_in_mode",
        "mcore:pipeline_parallel/schedules.py",
        "torch.autograd.backward(output_tensor[0], grad_tensors=output_tensor_grad[0])",
        "with deallocate_pipeline_outputs False (MLAModelProvider's) the schedule calls "
        "torch.autograd.backward, which torch routes through the device-literal mode and runs "
        "with the mode popped: the mode is pushed back for the engine call (backward_mode.py)",
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
    """'<file>:<line>' where the patched source line is (found by the product's source reader,
    `clipo_megatron.source_match`); SeamMoved when it is gone."""
    from clipo_megatron.source_match import Absent, Source

    root, rel = p.where.split(":", 1)
    path = _root(root) / rel
    try:
        return f"{path}:{Source(_root(root)).line(rel, p.line)}"
    except Absent as e:
        if e.symbol is None:
            raise SeamMoved(
                f"patch {p.name}: {path} does not exist (was {p.where}); update patch_lines"
            ) from None
        raise SeamMoved(
            f"patch {p.name}: `{p.line}` is no longer in {path}: the code it stands in for moved; "
            "update clipo_testkit/nemo_rl/real_worker/patch_lines.py and cpu_patches.py"
        ) from None


def check_sources() -> dict[str, str]:
    """{patch name: file:line} for every patch (raises SeamMoved naming the first that moved)."""
    return {p.name: locate(p) for p in PATCHES}
