# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The Qwen3.5 checks, run in a spawned rank (`spawn.run_ranks`): Bridge's Qwen3VLModel built from
the tiny Hugging Face checkpoint (`qwen35_model`, `qwen35_moe_model`), alone and inside NeMo-RL's
MegatronPolicyWorker, against Hugging Face's model of the checkpoint's architecture
(Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration) on the same rows. Test code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from clipo_testkit.nemo_rl.inspection import head_state


@torch.no_grad()
def hf_reference(model_dir: Path, ids: torch.Tensor, lengths, resp: torch.Tensor) -> dict:
    """Per row alone: token logprobs [B, S] (0 at position 0 and past the length) and the mean of
    HF's final-norm output (`model.language_model.norm`) over the row's response tokens [B, H];
    MoE: the smallest gap between a token's 2nd and 3rd router logit over every layer
    (`router_gap`: top-2 flips under a rounding difference only below ~1e-6)."""
    import transformers

    arch = _config(model_dir)["architectures"][0]
    hf = getattr(transformers, arch).from_pretrained(model_dir, dtype=torch.float32).eval()
    seen: dict[str, torch.Tensor] = {}
    hook = hf.model.language_model.norm.register_forward_hook(lambda m, i, o: seen.update(h=o))
    routers: list[torch.Tensor] = []
    hooks = [hook] + [
        layer.mlp.gate.register_forward_hook(lambda _m, _i, o: routers.append(o[0]))
        for layer in hf.model.language_model.layers
        if hasattr(layer.mlp, "gate")
    ]
    lp = torch.zeros(ids.shape, dtype=torch.float64)
    pooled = []
    try:
        for i in range(ids.shape[0]):
            n = int(lengths[i])
            row = ids[i : i + 1, :n]
            logits = hf(input_ids=row).logits[0, :-1].double()
            lp[i, 1:n] = logits.log_softmax(-1).gather(-1, row[0, 1:, None])[:, 0]
            pooled.append(seen["h"][0][resp[i, :n].bool()].mean(0))
    finally:
        for h in hooks:
            h.remove()
    top = torch.cat(routers).topk(3, dim=-1).values if routers else None  # [tokens, 3]
    gap = float((top[:, 1] - top[:, 2]).min()) if top is not None else float("inf")
    return {"logprobs": lp, "pooled": torch.stack(pooled), "router_gap": gap}


def _config(model_dir) -> dict:
    return json.loads((Path(model_dir) / "config.json").read_text())


def is_moe(model_dir) -> bool:
    return bool(_config(model_dir)["text_config"].get("num_experts"))


def rows(vocab: int, seed: int = 3):
    """Four prompt + response rows of random character tokens, lengths 9..30, right-padded."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([30, 17, 9, 24])
    ids = torch.zeros(4, 30, dtype=torch.long)
    resp = torch.zeros(4, 30)
    for i, n in enumerate(lengths.tolist()):
        ids[i, :n] = torch.randint(7, vocab, (n,), generator=gen)
        resp[i, 4:n] = 1.0
    return ids, lengths, resp


def model_level(rank: int, world: int, model_dir: str) -> dict[str, Any]:
    """Bridge's AutoBridge import -> Qwen35VLModelProvider -> Qwen3VLModel (CPU modules), HF weights
    loaded by Bridge; one forward of the rows (right-padded, no mask: causal), logits and the
    output of `find_final_norm`'s module, against HF's."""
    from megatron.bridge import AutoBridge
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    from clipo_megatron.megatron.pooling.final_norm import find_final_norm
    from clipo_testkit.nemo_rl.real_worker.qwen35_model import (
        cpu_qwen35_patches,
        cpu_qwen35_provider,
    )

    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel()
    model_parallel_cuda_manual_seed(1234)
    bridge = AutoBridge.from_hf_pretrained(model_dir, dtype=torch.float32)
    provider = cpu_qwen35_provider(bridge.to_megatron_provider(load_weights=False))
    provider.params_dtype, provider.bf16, provider.fp16 = torch.float32, False, False
    provider.finalize()
    with cpu_qwen35_patches():
        model = provider.provide(pre_process=True, post_process=True).eval()
        bridge.load_hf_weights([model])
        norm = find_final_norm(model)
        ids, lengths, resp = rows(int(model.language_model.vocab_size) - 4)
        seen: dict[str, torch.Tensor] = {}
        hook = norm.register_forward_hook(  # as the pooler reads a hooked module's output
            lambda m, i, o: seen.update(h=o[0] if isinstance(o, tuple) else o)
        )
        with torch.no_grad():
            logits = model(input_ids=ids, position_ids=None, attention_mask=None)
        hook.remove()
    ref = hf_reference(Path(model_dir), ids, lengths, resp)
    lp = torch.zeros(ids.shape, dtype=torch.float64)
    lp[:, 1:] = logits[:, :-1].double().log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
    valid = (torch.arange(ids.shape[1])[None] < lengths[:, None]) & (torch.arange(ids.shape[1]) > 0)
    if "h" not in seen:
        raise AssertionError(f"find_final_norm's module ({type(norm).__name__}) never ran")
    states = seen["h"].transpose(0, 1)  # [S, B, H] -> [B, S, H]
    pooled = (states * resp[..., None]).sum(1) / resp.sum(1, keepdim=True)
    return {
        "norm_is_language_final": norm is model.language_model.decoder.final_layernorm,
        "lp_err": float((lp - ref["logprobs"])[valid].abs().max()),
        "pooled_err": float((pooled.double() - ref["pooled"].double()).abs().max()),
        "pooled_scale": float(ref["pooled"].abs().max()),
        "gdn_layers": sum(
            type(layer.self_attention).__name__ == "GatedDeltaNet"
            for layer in model.language_model.decoder.layers
        ),
        "moe_layers": _moe_layers(model.language_model.decoder.layers),
        "router_gap": ref["router_gap"],
    }


def _moe_layers(layers) -> list[str]:
    """Per MoE layer: `<MoE layer>/<experts>/<shared experts, gated or not>` class names."""
    return [
        f"{type(m).__name__}/{type(m.experts).__name__}/{type(m.shared_experts).__name__}"
        + ("+gate" if getattr(m.shared_experts, "use_shared_expert_gate", False) else "")
        for m in (layer.mlp for layer in layers)
        if hasattr(m, "router")
    ]


def worker_level(rank: int, world: int, out_dir: str, model_dir: str, packing: bool) -> dict:
    """NeMo-RL's MegatronPolicyWorker with the CLIPO extension (NeMo-RL's real __init__ through
    Bridge): get_logprobs with CLIPO off, then clipo_setup and get_logprobs with the pooler."""
    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY
    from clipo_testkit import gdn_reference
    from clipo_testkit.nemo_rl.real_worker import build
    from clipo_testkit.nemo_rl.real_worker.qwen35_model import cpu_qwen35_patches
    from clipo_testkit.nemo_rl.real_worker.scenario import CLIPO, batch, packing_args

    out, model = Path(out_dir), Path(model_dir)
    policy = build.contract_policy(model, out, dp=world, packing=packing)
    if is_moe(model):  # the MoE recipes' keys, CPU-ready, EP 1 (moe_model.moe_policy)
        from clipo_testkit.nemo_rl.real_worker.moe_model import moe_policy

        policy = moe_policy(policy, ep=1)
    segments = _count_segments(gdn_reference)
    with cpu_qwen35_patches():
        worker = build.build_worker(policy, dp=world)
        tok = worker.tokenizer
        data = batch(tok.pad_token_id, len(tok))
        pack = packing_args(policy) if packing else None
        shards = data.shard_by_batch_size(world, batch_size=None, sequence_packing_args=pack)
        shard = (shards[0] if isinstance(shards, tuple) else shards)[rank]  # (shards, bins) packed
        off = worker.get_logprobs(data=shard)["logprobs"]
        worker.clipo_setup(clipo_cfg=CLIPO)
        on = worker.get_logprobs(data=shard)["logprobs"]
    ref = hf_reference(model, shard["input_ids"], shard["input_lengths"], shard["token_mask"])
    lengths = shard["input_lengths"]
    valid = (torch.arange(on.shape[1])[None] < lengths[:, None]) & (torch.arange(on.shape[1]) > 0)
    order = head_state(worker).rows.cpu()
    pos = {int(r): j for j, r in enumerate(shard[SAMPLE_IDX_KEY].tolist())}
    ref_pooled = ref["pooled"][[pos[int(r)] for r in order]]
    return {
        "bit_equal": bool(torch.equal(on, off)),
        "lp_err": float((on.double() - ref["logprobs"])[valid].abs().max()),
        "pooled_err": float(
            (head_state(worker).pooled.detach().cpu().double() - ref_pooled).abs().max()
        ),
        "packing": bool(policy["sequence_packing"]["enabled"]),
        "router_gap": ref["router_gap"],
        "gdn_max_segments": max(segments),  # sequences in one GDN kernel call (packed: > 1)
        "model_class": type(
            worker.model.module if hasattr(worker.model, "module") else worker.model
        ).__name__,
    }


def _count_segments(module) -> list[int]:
    """Record how many sequences each reference GDN kernel call runs (its `cu_seqlens`)."""
    seen = [0]
    inner = module._segments

    def counting(total, cu_seqlens):
        out = inner(total, cu_seqlens)
        seen.append(len(out))
        return out

    module._segments = counting
    return seen
