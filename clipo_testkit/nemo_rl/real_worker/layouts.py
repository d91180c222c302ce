# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own worker in the layouts its recipes run: TP (+ SP), PP, CP, DP with the distributed
optimizer, bf16; each rank's numbers read where they live, for the test to hold against TP 1.

`Layout` is one parallel shape; `layout_policy` makes the contract recipe's policy section run it
(the parallel sizes, the distributed optimizer with the recipes' grad-reduce / param-gather
overlap, bf16); `layout_methods` is what each rank runs: NeMo-RL's real `__init__` with the layout's
`NamedSharding`, `get_logprobs` with the CLIPO pooler, the CLIPO head step (r_CL), one `train`
step, and a second `get_logprobs` after it (a stale parameter gather shows there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clipo_testkit.nemo_rl.inspection import head_state
from clipo_testkit.nemo_rl.real_worker import scenario


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1  # context parallel (packed sequences, the zigzag split; test-side CP attention)
    sp: bool = False  # sequence parallel (needs tp > 1)
    dist_opt: bool = False  # Megatron's distributed optimizer, overlapped as the recipes set it
    bf16: bool = False
    head_tp: bool = False  # CLIPO's TP-sharded head (clipo.head_tensor_parallel)
    overlap: bool | None = None  # grad-reduce / param-gather overlap (None: = dist_opt)
    emulated: bool = False  # under `clipo_testkit.emulated_cuda` instead of host mode
    ep: int = 1  # expert parallel (an MoE model; carved out of DP, as Megatron-Core lays it out)
    clipo: bool = True  # False: the same calls with CLIPO off (no pooler, no head step)
    grads: bool = False  # record `grad_dump`'s per-parameter step (grads, TP attributes, values)

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def name(self) -> str:
        parts = (
            [f"tp{self.tp}"]
            + [f"pp{self.pp}"] * (self.pp > 1)
            + [f"cp{self.cp}"] * (self.cp > 1)
            + [f"dp{self.dp}"] * (self.dp > 1)
            + [f"ep{self.ep}"] * (self.ep > 1)
        )
        parts += ["sp"] * self.sp + ["distopt"] * self.dist_opt + ["bf16"] * self.bf16
        parts += ["headtp"] * self.head_tp + ["emulated"] * self.emulated
        return "-".join(parts + ["clipo-off"] * (not self.clipo))

    def coords(self, rank: int) -> dict[str, int]:
        """Megatron-Core's default order (tp fastest, then cp, dp, pp), as NeMo-RL's
        `NamedSharding` lays ranks out: [pp, dp, cp, tp]."""
        tp, rest = rank % self.tp, rank // self.tp
        cp, rest = rest % self.cp, rest // self.cp
        dp, pp = rest % self.dp, rest // self.dp
        return {"tp": tp, "cp": cp, "dp": dp, "pp": pp}


BF16_U, BF16_LAM = 2.0**-8, 4.0  # bf16's unit roundoff; lam of the probabilistic bound


def bf16_relative_bound(layers: int, *, logits: bool = False) -> float:
    """lam * sqrt(n) * u (Higham and Mary, 2019): n independent roundings of unit roundoff u stay
    under it with probability >= 1 - 2 exp(-lam^2 / 2). n counts the bf16 roundings on the path:
    the embedding and the final norm, and 9 per layer (input norm, QKV, the attention output, its
    projection, the residual add, the MLP norm, FC1 with its activation, FC2, the residual add);
    `logits` adds the output layer and the log-softmax."""
    n = 2 + 9 * layers + (2 if logits else 0)
    return BF16_LAM * n**0.5 * BF16_U


def layout_policy(policy: dict[str, Any], layout: Layout) -> dict[str, Any]:
    """The CPU-ready contract policy (`build.cpu_policy_config`) in `layout`."""
    policy = dict(policy)
    mc = policy["megatron_cfg"] = dict(policy["megatron_cfg"])
    mc.update(
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        context_parallel_size=layout.cp,
        sequence_parallel=layout.sp,
    )
    if layout.bf16:
        policy["precision"] = "bfloat16"
        mc["pipeline_dtype"] = "bfloat16"
    mc["optimizer"] = {
        **mc["optimizer"],
        "bf16": layout.bf16,
        "use_distributed_optimizer": layout.dist_opt,
    }
    overlap = layout.dist_opt if layout.overlap is None else layout.overlap
    mc["distributed_data_parallel_config"] = {
        **mc["distributed_data_parallel_config"],
        # the recipes (clipo_base.yaml, NeMo-RL's grpo_math_1B_megatron.yaml) overlap both with
        # the distributed optimizer and reduce gradients in fp32
        "overlap_grad_reduce": overlap,
        "overlap_param_gather": overlap,
        "grad_reduce_in_fp32": layout.bf16,
    }
    from clipo_testkit.nemo_rl.real_worker import mla_model, moe_model

    if moe_model.is_moe(Path(policy["model_name"])):  # the MoE recipes' keys, EP `layout.ep`
        policy = moe_model.moe_policy(policy, ep=layout.ep)
    elif mla_model.is_mla(Path(policy["model_name"])):  # the Moonlight recipes' MoE keys
        policy = mla_model.mla_policy(policy, ep=layout.ep)
    return policy


def _sharding(layout: Layout):
    import numpy as np
    from nemo_rl.distributed.named_sharding import NamedSharding

    return NamedSharding(
        layout=np.arange(layout.world).reshape(layout.pp, layout.dp, layout.cp, layout.tp),
        names=["pipeline_parallel", "data_parallel", "context_parallel", "tensor_parallel"],
    )


def _build(out: Path, model: Path, layout: Layout, **paths: Any):
    from clipo_testkit.nemo_rl.real_worker import build

    policy = layout_policy(build.contract_policy(model, out, dp=layout.dp), layout)
    worker = build.build_worker(policy, sharding=_sharding(layout), **paths)
    if layout.clipo:
        worker.clipo_setup(clipo_cfg={**scenario.CLIPO, "head_tensor_parallel": layout.head_tp})
    return policy, worker


def _measure(worker, policy, layout: Layout, rank: int, head_step: int) -> dict[str, Any]:
    """get_logprobs with the pooler, the CLIPO head step, one `train`, a second get_logprobs."""
    from nemo_rl.algorithms.loss.loss_functions import NLLLossFn

    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY

    tok = worker.tokenizer
    data = scenario.batch(tok.pad_token_id, len(tok))
    pack = scenario.packing_args(policy)
    where = layout.coords(rank)
    res: dict[str, Any] = {"rank": rank, **where}

    # get_logprobs: the driver shards over DP only; TP / PP ranks of a DP rank get the same rows
    shards, _ = data.shard_by_batch_size(layout.dp, batch_size=None, sequence_packing_args=pack)
    shard = shards[where["dp"]]
    res["rows"] = shard[SAMPLE_IDX_KEY].clone()
    res["lengths"] = shard["input_lengths"].clone()
    res["logprobs"] = worker.get_logprobs(data=shard)["logprobs"].double()
    if head_state(worker) is not None:  # the last pipeline stage
        res["pooled_rows"] = head_state(worker).rows.cpu().clone()
        res["pooled"] = head_state(worker).pooled.detach().float().cpu().clone()
    if layout.clipo:
        correct, groups = scenario.CORRECT, scenario.GROUPS
        step = worker.clipo_head_step(correct=correct, group_ids=groups, step=head_step)
        res["r_cl_rows"], res["r_cl"] = step["sample_idx"], step["rewards"].double()

    shards = data.shard_by_batch_size(layout.dp, batch_size=scenario.B, sequence_packing_args=pack)
    shards = shards[0] if isinstance(shards, tuple) else shards
    from clipo_testkit.nemo_rl.real_worker import grad_dump

    if layout.grads:  # each parameter's part of the grad norm, recorded at the step
        res["grads"] = grad_dump.record_step(worker)
    train_out = worker.train(
        data=shards[where["dp"]], loss_fn=NLLLossFn(), gbs=scenario.B, mbs=scenario.B // layout.dp
    )
    res["train"] = {
        "loss": float(train_out["global_loss"].sum()),
        "grad_norm": float(train_out["grad_norm"][0]),
    }
    res["moe_metrics"] = dict(train_out.get("moe_metrics") or {})  # the router's aux loss (MoE)
    shards, _ = data.shard_by_batch_size(layout.dp, batch_size=None, sequence_packing_args=pack)
    res["logprobs_after"] = worker.get_logprobs(data=shards[where["dp"]])["logprobs"].double()
    if head_state(worker) is not None:
        # read after the next forward: with overlap_param_gather a rank's copy of a weight
        # another DP rank owns is gathered by that forward's pre-hook (Megatron-Core's design),
        # so right after `train` it is still the old one on that rank
        res["norm_weight"] = scenario.final_norm_weight(worker).float()
    from clipo_testkit.nemo_rl.real_worker.moe_model import expert_weights

    res["experts"] = expert_weights(worker)  # MoE: after the step's param gather, as norm_weight
    if layout.grads:
        res["values"] = grad_dump.values(worker)  # every parameter after the step
    if head_state(worker) is not None:  # the head after its step: one head on every rank
        res["head"] = worker.clipo_head_state()["head"]
    return res


def layout_methods(
    rank: int, world: int, out_dir: str, model_dir: str, layout: Layout
) -> dict[str, Any]:
    assert world == layout.world
    policy, worker = _build(Path(out_dir), Path(model_dir), layout)
    return _measure(worker, policy, layout, rank, head_step=0)


def saved_then_measured(
    rank: int, world: int, out_dir: str, model_dir: str, layout: Layout, ckpt: str
) -> dict[str, Any]:
    """Step 1 (the calls of `layout_methods`, measured before anything is saved), NeMo-RL's
    checkpoint with the head's at `ckpt`, then step 2 measured: what a resume from `ckpt` in
    another layout must repeat. -> {"step1": ..., "step2": ...}"""
    assert world == layout.world
    policy, worker = _build(Path(out_dir), Path(model_dir), layout)
    step1 = _measure(worker, policy, layout, rank, head_step=0)
    step_dir = Path(ckpt) / "step_1"
    worker.save_checkpoint(**scenario.policy_paths(step_dir))
    worker.clipo_save_head(step_dir=str(step_dir), extra={"step": 1})
    return {"step1": step1, "step2": _measure(worker, policy, layout, rank, head_step=1)}


def resumed_then_measured(
    rank: int, world: int, out_dir: str, model_dir: str, layout: Layout, ckpt: str
) -> dict[str, Any]:
    """A fresh worker in `layout` built from `ckpt` (NeMo-RL resumes by construction, Bridge's
    torch_dist resharding the policy and its optimizer), the head loaded, then step 2 measured."""
    assert world == layout.world
    step_dir = Path(ckpt) / "step_1"
    policy, worker = _build(
        Path(out_dir), Path(model_dir), layout, **scenario.policy_paths(step_dir)
    )
    worker.clipo_load_head(step_dir=str(step_dir))
    return _measure(worker, policy, layout, rank, head_step=1)
