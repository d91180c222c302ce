# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The tiny Nemotron-H of `hybrid_model.py` with a multi-token-prediction (MTP) block, as the
Nemotron 3 Super recipes train it, and the rank function that runs NeMo-RL's worker on it.

Hugging Face's `NemotronHForCausalLM` (transformers 5.8.1) has no MTP module: its config carries
`num_nextn_predict_layers` / `mtp_layers_block_type`, its forward is the main head only, and it
ignores `mtp.*` keys on load (`_keys_to_ignore_on_load_unexpected`), so `save_pretrained` writes
none. The MTP weights are added to the checkpoint here: random tensors under the names and shapes
Megatron-Bridge's `NemotronHBridge` maps (`mtp.layers.{outer * L + inner}.*`, L = the MTP
pattern's length: eh_proj / enorm / hnorm on inner 0, final_layernorm on inner L - 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from clipo_testkit.nemo_rl.inspection import head_state
from clipo_testkit.nemo_rl.real_worker import hybrid_model

_HYBRID_STACK_SPEC = hybrid_model.cpu_hybrid_stack_spec  # before `cpu_mtp_stand_ins`
MTP_PATTERN = ["attention", "mlp"]  # "*-": the MTP block's inner HybridStack
# the worker's megatron_cfg, as grpo-nemotron3-super-120BA12B-16n4g-megatron-qa-bf16-300step.yaml
# sets it (mtp_use_repeated_layer and the scaling factor from its parent, 16n8g-megatron.yaml)
MTP_CFG = {
    "mtp_num_layers": 2,
    "mtp_use_repeated_layer": True,
    "mtp_detach_heads": False,
    "mtp_loss_scaling_factor": 0.3,
}


def _mtp_tensors(cfg: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """One MTP depth (HF: num_nextn_predict_layers = 1) in the HF names Bridge maps."""
    h, hd = cfg["hidden_size"], cfg["head_dim"]
    q, kv, ffn = (
        cfg["num_attention_heads"] * hd,
        cfg["num_key_value_heads"] * hd,
        cfg["intermediate_size"],
    )

    def w(*shape):
        return torch.randn(*shape, generator=gen) / shape[-1] ** 0.5

    def norm():
        return 1.0 + 0.2 * torch.randn(h, generator=gen)

    last = len(MTP_PATTERN) - 1
    out = {
        "mtp.layers.0.eh_proj.weight": w(h, 2 * h),
        "mtp.layers.0.enorm.weight": norm(),
        "mtp.layers.0.hnorm.weight": norm(),
        f"mtp.layers.{last}.final_layernorm.weight": norm(),
    }
    for i, kind in enumerate(MTP_PATTERN):
        p = f"mtp.layers.{i}."
        out[p + "norm.weight"] = norm()
        if kind == "attention":
            out |= {
                p + "mixer.q_proj.weight": w(q, h),
                p + "mixer.k_proj.weight": w(kv, h),
                p + "mixer.v_proj.weight": w(kv, h),
                p + "mixer.o_proj.weight": w(h, q),
            }
        else:
            out |= {p + "mixer.up_proj.weight": w(ffn, h), p + "mixer.down_proj.weight": w(h, ffn)}
    return out


def tiny_hybrid_mtp_model(path: Path, *, seed: int = 0) -> Path:
    """`hybrid_model.tiny_hybrid_model` + one MTP depth ("*-") in its config and checkpoint."""
    from safetensors.torch import load_file, save_file

    hybrid_model.tiny_hybrid_model(path, seed=seed)
    cfg_file = path / "config.json"
    cfg = json.loads(cfg_file.read_text())
    if cfg.get("num_nextn_predict_layers"):
        return path
    file = path / "model.safetensors"
    state = load_file(file)
    state |= _mtp_tensors(cfg, torch.Generator().manual_seed(seed + 1))
    save_file(state, file, metadata={"format": "pt"})
    cfg.pop("mtp_hybrid_override_pattern", None)
    cfg |= {"num_nextn_predict_layers": 1, "mtp_layers_block_type": MTP_PATTERN}
    cfg_file.write_text(json.dumps(cfg, indent=2))
    return path


def cpu_hybrid_mtp_stack_spec(config=None, *args, **kwargs):
    """`hybrid_model.cpu_hybrid_stack_spec` with torch norms in the MTP block too: ModelOpt's
    local spec gives its MTP layer `post_training.modelopt.layers.Norm` (enorm, hnorm, the final
    layernorm), which raises without TransformerEngine (modelopt/layers.py:62)."""
    from clipo_testkit.nemo_rl.real_worker.thd_attention import SequenceParallelTorchNorm

    spec = _HYBRID_STACK_SPEC(config, *args, **kwargs)
    for layer in spec.submodules.mtp_block_spec.submodules.layer_specs:
        sub = layer.submodules
        sub.enorm = sub.hnorm = sub.layer_norm = SequenceParallelTorchNorm
    return spec


def cpu_mtp_stand_ins() -> None:
    """In this (spawned) rank process, what MTP needs on CPU:
    - `cpu_patches.make_cpu_provider` hands Bridge's hybrid provider
      `hybrid_model.cpu_hybrid_stack_spec`, looked up at call time: it gets the MTP-ready spec
      above instead (hybrid_model.py is another case's file);
    - Megatron-Core's MTP layer asks `is_inference_column_parallel_linear` of its eh_proj and
      first inner linear (multi_token_prediction.py:1020, 1070); without TransformerEngine the
      classes it checks against are MagicMocks (inference_layers.py:277 subclasses
      TEColumnParallelLinear, a Mock without TE) and `isinstance` raises TypeError. Without TE no
      inference-optimised linear exists: the answer is False;
    - Bridge's MTP mapping names the MTP attention's input norm only as TE fuses it
      (`...self_attention.linear_qkv.layer_norm_weight`); its alias for a separate norm
      (`input_layernorm.weight`) is made for `AutoMapping`s alone (mapping_registry.py:106-110
      prints "Unrecognized mapping type" for `_MTPFlatteningMapping`), so with the local spec the
      import finds no mapping and stops (model_bridge.py:1303, a None task). The alias is added:
      the same HF tensor (`mtp.layers.N.norm.weight`) into the local spec's module."""
    import megatron.core.transformer.multi_token_prediction as mtp

    hybrid_model.cpu_hybrid_stack_spec = cpu_hybrid_mtp_stack_spec
    mtp.is_inference_column_parallel_linear = lambda _module: False
    _map_mtp_input_norm()


def _map_mtp_input_norm() -> None:
    from megatron.bridge.models.conversion.mapping_registry import MegatronMappingRegistry
    from megatron.bridge.models.nemotronh import nemotron_h_bridge as nh

    original = nh.NemotronHBridge.mapping_registry
    if getattr(original, "_clipo_cpu", False):
        return

    def mapping_registry(self):
        registry = original(self)
        _, pattern = self._hf_mtp_config(self.hf_config)
        if not pattern:
            return registry
        alias = nh._MTPFlatteningMapping(
            megatron_param="mtp.layers.*.mtp_model_layer.layers.*.input_layernorm.weight",
            hf_param="mtp.layers.*.norm.weight",
            mtp_layers_per_block=len(pattern),
        )
        return MegatronMappingRegistry(*registry.mappings, alias)

    mapping_registry._clipo_cpu = True  # type: ignore[attr-defined]
    nh.NemotronHBridge.mapping_registry = mapping_registry


# Megatron's MTP parameter (repeated layer: outer 0) <- the HF tensor Bridge maps into it
MTP_SOURCES = {
    "eh_proj.weight": "mtp.layers.0.eh_proj.weight",
    "enorm.weight": "mtp.layers.0.enorm.weight",
    "hnorm.weight": "mtp.layers.0.hnorm.weight",
    "final_layernorm.weight": "mtp.layers.1.final_layernorm.weight",
    "mtp_model_layer.layers.0.input_layernorm.weight": "mtp.layers.0.norm.weight",
    "mtp_model_layer.layers.0.self_attention.linear_proj.weight": "mtp.layers.0.mixer.o_proj.weight",
    "mtp_model_layer.layers.1.pre_mlp_layernorm.weight": "mtp.layers.1.norm.weight",
    "mtp_model_layer.layers.1.mlp.linear_fc1.weight": "mtp.layers.1.mixer.up_proj.weight",
    "mtp_model_layer.layers.1.mlp.linear_fc2.weight": "mtp.layers.1.mixer.down_proj.weight",
}
QKV = "mtp_model_layer.layers.0.self_attention.linear_qkv.weight"


def imported_mtp_error(mtp_state: dict[str, torch.Tensor], model_dir: Path) -> float:
    """Max |Megatron - checkpoint| over the MTP block as Bridge imported it; the fused QKV
    (Bridge interleaves q, k, v per query group) as the same set of rows. inf if one is missing."""
    from safetensors.torch import load_file

    hf = load_file(Path(model_dir) / "model.safetensors")
    got = {k.split("mtp.layers.0.", 1)[-1]: v for k, v in mtp_state.items()}
    if set(got) != {*MTP_SOURCES, QKV}:
        return float("inf")
    err = max(float((got[k] - hf[src]).abs().max()) for k, src in MTP_SOURCES.items())
    want = torch.cat([hf[f"mtp.layers.0.mixer.{x}_proj.weight"] for x in "qkv"])
    rows = got[QKV]
    if rows.shape != want.shape:
        return float("inf")
    order = [t[torch.argsort(t[:, 0])] for t in (rows, want)]
    return max(err, float((order[0] - order[1]).abs().max()))


def mtp_params(worker) -> dict[str, torch.Tensor]:
    """The worker model's MTP parameters (`mtp.*`), detached to CPU."""
    return {
        k: v.detach().cpu().clone()
        for k, v in worker.model.state_dict().items()
        if ".mtp." in f".{k}" and isinstance(v, torch.Tensor) and not k.endswith("_extra_state")
    }


def grpo_batch(data, rows: torch.Tensor, logprobs: torch.Tensor, head: dict) -> None:
    """The GRPO train fields on `data` (row order): on-policy logprobs (the CLIPO-on pass) as
    prev / generation / reference logprobs, and per row the advantage r + r_CL minus its prompt
    group's mean (r: `scenario.CORRECT`; r_CL: the head step's rewards)."""
    from clipo_testkit.nemo_rl.real_worker import scenario

    lp = torch.zeros_like(logprobs, dtype=torch.float32)
    lp[rows] = logprobs.float()
    r = scenario.CORRECT.float()
    r[head["sample_idx"]] += head["rewards"].float()
    groups = scenario.GROUPS
    mean = torch.zeros(int(groups.max()) + 1).index_add_(0, groups, r) / torch.bincount(groups)
    adv = (r - mean[groups])[:, None].expand_as(lp).clone()
    for key in ("prev_logprobs", "generation_logprobs", "reference_policy_logprobs"):
        data[key] = lp.clone()
    data["advantages"] = adv


def mtp_worker_run(rank: int, world: int, out_dir: str, model_dir: str) -> dict:
    """One rank: NeMo-RL's worker with MTP on (MTP_CFG in megatron_cfg); get_logprobs with CLIPO
    off, then on; CLIPO's head step; one `train` step (the MTP loss on) with NeMo-RL's GRPO loss
    (`ClippedPGLossFn`) on advantages of r + r_CL (`grpo_batch`)."""
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn

    from clipo_megatron.nemo_rl.loss_functions import policy_loss_config
    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY
    from clipo_testkit.nemo_rl.real_worker import build, scenario

    hybrid_model.bind_kernels()
    cpu_mtp_stand_ins()
    policy = build.contract_policy(Path(model_dir), Path(out_dir), dp=world)
    policy["megatron_cfg"] = {**policy["megatron_cfg"], **MTP_CFG}
    worker = build.build_worker(policy, dp=world)
    data = scenario.batch(worker.tokenizer.pad_token_id, len(worker.tokenizer))
    pack = scenario.packing_args(policy)
    shards, _ = data.shard_by_batch_size(world, batch_size=None, sequence_packing_args=pack)
    shard = shards[rank]
    off = worker.get_logprobs(data=shard)["logprobs"].clone()
    worker.clipo_setup(clipo_cfg=scenario.CLIPO)
    on = worker.get_logprobs(data=shard)["logprobs"].clone()
    res = {
        "rows": shard[SAMPLE_IDX_KEY].clone(),
        "lengths": shard["input_lengths"].clone(),
        "off": off,
        "on": on,
        "pooled_rows": head_state(worker).rows.cpu().clone(),
        "pooled": head_state(worker).pooled.detach().cpu().clone(),
        "hooked": hybrid_model.hooked_name(worker),
        "mtp_config": {k: getattr(worker.model.config, k, None) for k in MTP_CFG},
    }
    head = worker.clipo_head_step(correct=scenario.CORRECT, group_ids=scenario.GROUPS, step=1)
    res["head_metrics"] = {k: float(v) for k, v in head["metrics"].items()}
    grpo_batch(data, shard[SAMPLE_IDX_KEY], on, head)
    res["advantages"] = data["advantages"][:, 0].clone()
    before = mtp_params(worker)
    shards = data.shard_by_batch_size(world, batch_size=scenario.B, sequence_packing_args=pack)
    shards = shards[0] if isinstance(shards, tuple) else shards
    out = worker.train(
        data=shards[rank],
        loss_fn=ClippedPGLossFn(ClippedPGLossConfig(**policy_loss_config("grpo"))),
        gbs=scenario.B,
        mbs=scenario.B // world,
    )
    after = mtp_params(worker)
    res["mtp_before"] = before
    res["mtp_moved"] = sum(not torch.equal(before[k], after[k]) for k in after)
    res["train"] = {
        "loss": float(out["global_loss"].sum()),
        "grad_norm": float(out["grad_norm"][0]),
        "mtp_metrics": {k: float(v) for k, v in (out.get("mtp_metrics") or {}).items()},
    }
    return res
