# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own GRPO loop on CPU, built the way `grpo.setup` builds it (which needs GPUs).

Real NeMo-RL pieces: `grpo_train`; the recipe merged with NeMo-RL's parent
recipe and validated by its pydantic `MasterConfig`; `setup_response_data`
over the recipe's data sections (the shared parquet files) with this
project's processor and environment (a Ray actor); `Policy` (our
`ClipoPolicyMixin` over it, traced from test code by `tracing`) over a real `RayWorkerGroup` on
`RayVirtualCluster(use_gpus=False)`; `MegatronGeneration(policy=...)`
(colocated) and, where it exists, its `MegatronWeightSynchronizer`;
`StatefulDataLoader` + `rl_collate_fn`; `Logger`; `CheckpointManager` with
its resume paths and dataloader state; `ClippedPGLossFn`.
The policy worker is NeMo-RL's own `MegatronPolicyWorkerImpl` with the CLIPO extension
(`real_worker/ray_worker.py`: CUDA / NCCL calls patched from outside, a CPU layer spec, fp32).
Ours: generation (a seeded CPU sampler over the worker's own model, in place of Megatron-Core's
CUDA inference engine) and the CLIPO seams the driver installs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from unittest import mock

RECIPES = {
    "grpo": "examples/configs/track1_qwen3b.yaml",
    "dapo": "examples/configs/track1_qwen3b_dapo.yaml",
    "gspo": "examples/configs/track1_qwen3b_gspo.yaml",
    "gmpo": "examples/configs/track1_qwen3b_gmpo.yaml",
}
ROOT = Path(__file__).resolve().parents[2]


def contract_config(
    objective: str,
    clipo_on: bool,
    *,
    model_dir: Path,
    out_dir: Path,
    max_steps: int,
    warmup_steps: int = 1,
    dp: int = 1,
    packing: bool = True,
    world: int | None = None,
) -> dict[str, Any]:
    """The objective's track-1 recipe (with NeMo-RL's parent merged), shrunk to a CPU run (and to
    the GPU kit's tier 2). `packing`: the recipes' sequence packing (on in both)."""
    from clipo_megatron.core.objectives import get_objective
    from clipo_megatron.nemo_rl.guard.recipes import load_recipe

    prompts, gens = 2, 8
    overrides = [
        f"clipo.enabled={str(clipo_on).lower()}",
        f"clipo.method.warmup_steps={warmup_steps}",
        "clipo.method.embed_dim=16",
        f"grpo.num_prompts_per_step={prompts}",
        f"grpo.num_generations_per_prompt={gens}",
        f"grpo.max_num_steps={max_steps}",
        "grpo.val_period=0",
        "grpo.val_at_end=false",
        "grpo.val_at_start=false",
        "grpo.max_val_samples=4",
        "grpo.val_batch_size=4",
        f"policy.model_name={model_dir}",
        f"policy.tokenizer.name={model_dir}",
        # two optimizer steps per GRPO step: the second minibatch is off-policy, so each
        # objective's ratio, clipping and aggregation act (on-policy they coincide at ratio 1)
        f"policy.train_global_batch_size={prompts * gens // 2}",
        f"policy.train_micro_batch_size={8 // dp}",  # divides each DP rank's share
        f"policy.logprob_batch_size={8 // dp}",
        "policy.generation_batch_size=16",
        "policy.max_total_sequence_length=1024",
        "policy.megatron_cfg.optimizer.lr=1e-4",
        "policy.megatron_cfg.optimizer.min_lr=1e-4",
        "policy.generation.backend=megatron",
        "policy.generation.max_new_tokens=24",  # room for the lead-ins (contract_model.py)
        "policy.generation.temperature=1.0",
        "policy.generation.colocated.enabled=true",
        "data.max_input_seq_length=1000",
        "data.shuffle=false",
        "data.num_workers=0",
        "env.clipo_math.num_workers=1",
        "logger.tensorboard_enabled=true",
        "logger.wandb_enabled=false",
        "logger.monitor_gpus=false",
        f"logger.log_dir={out_dir / 'logs'}",
        f"checkpointing.checkpoint_dir={out_dir / 'ckpt'}",
        "checkpointing.save_period=2",
        "checkpointing.metric_name=null",
        f"cluster.gpus_per_node={world or dp}",  # world: dp x the layout's TP x PP
        "cluster.num_nodes=1",
    ]
    if packing:  # bins of a few rows (several microbatches, rows sorted by NeMo-RL's packer),
        # slots padded to 8 as a TP8 + SP recipe pads them
        overrides += [
            f"policy.sequence_packing.logprob_mb_tokens={2 * 1024}",
            f"policy.sequence_packing.train_mb_tokens={2 * 1024}",
            "policy.make_sequence_length_divisible_by=8",
        ]
    else:
        overrides.append("policy.sequence_packing.enabled=false")
    if get_objective(objective).dynamic_sampling:  # it keeps mixed groups; let it draw more
        overrides.append("grpo.dynamic_sampling_max_gen_batches=4")
    cfg = load_recipe(ROOT / RECIPES[objective], overrides)
    cfg["policy"]["generation"]["mcore_generation_config"]["expose_http_server"] = False
    return cfg


def one_step_config(clipo_on: bool, *, model_dir: Path, out_dir: Path) -> dict[str, Any]:
    """The GRPO contract recipe for one step: no head-only warm-up (the preflight refuses a warm-up
    that would leave the policy never updated)."""
    return contract_config(
        "grpo", clipo_on, model_dir=model_dir, out_dir=out_dir, max_steps=1, warmup_steps=0
    )


def _field(block, key: str):
    """A `grpo:` field: a pydantic model on main, a TypedDict (plain dict) on v0.7.0."""
    return block[key] if isinstance(block, dict) else getattr(block, key)


def run_grpo(
    config: dict[str, Any], *, worker_fqn: str, use_gpus: bool = False, layout=None
) -> dict[str, Any]:
    """Run NeMo-RL's grpo_train with the CLIPO seams; return what the test compares.
    use_gpus: a GPU RayVirtualCluster (the GPU kit's tier 2); on CPU the policy section is made
    CPU-ready for NeMo-RL's worker (`real_worker.build.cpu_policy_config`: fp32, torch Adam).
    layout: a `real_worker.layouts.Layout` the CPU policy then runs (TP, SP, the distributed
    optimizer, bf16); the config's cluster must hold its world (`contract_config(world=...)`)."""
    import ray
    from nemo_rl.algorithms import grpo
    from nemo_rl.data.collate_fn import rl_collate_fn
    from nemo_rl.data.utils import load_dataloader_state
    from nemo_rl.distributed.virtual_cluster import RayVirtualCluster
    from nemo_rl.models.generation.megatron import MegatronGeneration
    from nemo_rl.utils.checkpoint import CheckpointManager
    from nemo_rl.utils.logger import Logger
    from torchdata.stateful_dataloader import StatefulDataLoader

    from clipo_megatron.nemo_rl import driver
    from clipo_megatron.nemo_rl.advantage_estimator import ClipoRunState
    from clipo_megatron.nemo_rl.config import validate_master_config
    from clipo_megatron.nemo_rl.driver import grpo_train_with_clipo, prepare
    from clipo_megatron.nemo_rl.loss_functions import build_policy_loss
    from clipo_megatron.nemo_rl.policy import make_clipo_policy_class
    from clipo_megatron.nemo_rl.port.compat import check_supported
    from clipo_megatron.nemo_rl.port.grpo_loop import GrpoTrainArgs
    from clipo_testkit.nemo_rl.tracing import Trace, tracing_estimator, tracing_policy_class

    if not use_gpus:
        from clipo_testkit.nemo_rl.real_worker.build import cpu_policy_config

        config = {**config, "policy": cpu_policy_config(config["policy"])}
        if layout is not None:
            from clipo_testkit.nemo_rl.real_worker.layouts import layout_policy

            config["policy"] = layout_policy(config["policy"], layout)
    flavour = check_supported()
    clipo = validate_master_config(config)
    master, tokenizer, (dataset, val_dataset, task_to_env, val_task_to_env) = prepare(config)
    logger = Logger(master.logger)
    checkpointer = CheckpointManager(master.checkpointing)
    last = checkpointer.get_latest_checkpoint_path()
    loaded = checkpointer.load_training_info(last)
    if hasattr(grpo, "_get_grpo_save_state"):  # main
        save_state = grpo._get_grpo_save_state(loaded)
    else:  # v0.7.0: a TypedDict
        save_state = loaded or grpo._default_grpo_save_state()
    weights_path, optimizer_path = checkpointer.get_resume_paths(last)

    world = int(master.cluster["gpus_per_node"])
    cluster = RayVirtualCluster(
        bundle_ct_per_node_list=[world],
        use_gpus=use_gpus,
        num_gpus_per_node=world,
        name="clipo_gpu" if use_gpus else "clipo_cpu",
    )
    state, trace = ClipoRunState(), Trace()  # the per-row values of every step, for the checks
    clipo_cls = make_clipo_policy_class(clipo, state, data_plane=driver.data_plane_of(config))
    policy_cls = tracing_policy_class(clipo_cls, trace)
    policy = policy_cls(  # the worker class by NeMo-RL's own argument, as a user would pick one
        worker_extension_cls_fqn=worker_fqn,
        cluster=cluster,
        config=master.policy,
        tokenizer=tokenizer,
        weights_path=weights_path,
        optimizer_path=optimizer_path,
        init_optimizer=True,
        init_reference_model=True,
    )
    head_at_start = None  # the head before any step: as initialised, or as a resumed run loaded it
    if clipo.enabled:
        head_at_start = policy.run_all_workers_single_data("clipo_head_state")
    generation = MegatronGeneration(config=master.policy, tokenizer=tokenizer, policy=policy)
    if hasattr(generation, "weight_synchronizer"):  # main: setup installs one
        from nemo_rl.weight_sync.factory import create_weight_synchronizer

        generation.weight_synchronizer = create_weight_synchronizer(
            policy, generation, "megatron", colocated=True
        )
    batch = _field(master.grpo, "num_prompts_per_step")
    if _field(master.grpo, "use_dynamic_sampling"):
        batch *= _field(master.grpo, "batch_multiplier")
    dataloader = StatefulDataLoader(
        dataset, batch_size=int(batch), shuffle=False, collate_fn=rl_collate_fn, drop_last=True
    )
    if last is not None:
        load_dataloader_state(dataloader, last, master.data, "")
    val_dataloader = StatefulDataLoader(
        val_dataset, batch_size=_field(master.grpo, "val_batch_size"), collate_fn=rl_collate_fn
    )
    loss_fn = build_policy_loss(clipo.objective, dict(master.loss_fn))
    metrics_log: list[tuple[int, dict]] = []
    orig_log = logger.log_metrics

    def log_metrics(metrics, step, prefix="", *a, **kw):  # keep what grpo_train logs
        metrics_log.append((step, prefix, dict(metrics)))
        return orig_log(metrics, step, prefix, *a, **kw)

    logger.log_metrics = log_metrics

    try:
        args = GrpoTrainArgs(
            generation,
            dataloader,
            val_dataloader,
            tokenizer,
            loss_fn,
            task_to_env,
            val_task_to_env,
            logger,
            checkpointer,
            save_state,
            master,
        )
        # the estimator the driver builds, by its module's name for it: a recording subclass
        with mock.patch.object(driver, "ClipoAdvantageEstimator", tracing_estimator(trace)):
            saved_at_deadline = grpo_train_with_clipo(grpo, clipo, state, policy, args)
        head = policy.run_all_workers_single_data("clipo_head_state") if clipo.head_runs else None
        packed_streams = (  # the CPU worker counts the packed streams it ran
            None if use_gpus else sum(policy.run_all_workers_single_data("packed_stream_count"))
        )
    finally:
        policy.shutdown()
        for env in {*task_to_env.values(), *val_task_to_env.values()}:
            ray.kill(env)
        cluster.shutdown()
    return {
        "flavour": flavour,
        "metrics": metrics_log,
        "clipo_step": state.step,
        "head": head,
        "head_at_start": head_at_start,
        "trace": trace,
        "packed_streams": packed_streams,
        "resumed_from": None if last is None else os.path.basename(str(last)),
        "saved_at_deadline": saved_at_deadline,  # CLIPO_SAVE_BY's stop (driver.py), else None
    }


def train_metrics(result: dict[str, Any], step: int) -> dict[str, float]:
    """Everything grpo_train (and the CLIPO seam) logged under `train/` for one step."""
    out: dict[str, float] = {}
    for s, prefix, m in result["metrics"]:
        if s == step and prefix == "train":
            out.update({k: float(v) for k, v in m.items() if isinstance(v, int | float)})
    return out
