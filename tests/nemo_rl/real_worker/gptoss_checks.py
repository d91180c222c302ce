# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What `test_gptoss` runs: Hugging Face's eager attention with sinks as the reference, and the
rank functions (spawned, inside `cpu_patches.cpu_worker_patches`) that build the tiny gpt-oss
through Bridge directly and through NeMo-RL's own worker."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import torch

from clipo_testkit.nemo_rl.inspection import head_state


class _One:
    """A process group of one (the attention's TP / CP group in the unit check)."""

    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


def attention_pair(model_dir: Path, layer: int):
    """(HF's GptOssAttention of `layer`, the CPU SinkWindowAttention with HF's sinks copied in,
    the HF config), for the unit check."""
    import transformers
    from megatron.core.transformer.transformer_config import TransformerConfig

    from clipo_testkit.nemo_rl.real_worker.gptoss_model import SinkWindowAttention

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    cfg = hf.config
    config = TransformerConfig(
        num_layers=cfg.num_hidden_layers,
        hidden_size=cfg.hidden_size,
        num_attention_heads=cfg.num_attention_heads,
        num_query_groups=cfg.num_key_value_heads,
        kv_channels=cfg.head_dim,
        softmax_type="learnable",
        window_size=(cfg.sliding_window - 1, 0),  # Bridge's gpt_oss_bridge.py
        window_attn_skip_freq=2,
        attention_dropout=0.0,
    )
    pgs = types.SimpleNamespace(tp=_One(), cp=_One())
    ours = SinkWindowAttention(config, layer + 1, None, pg_collection=pgs).eval()
    with torch.no_grad():
        ours.softmax_offset.copy_(hf.model.layers[layer].self_attn.sinks)
    return hf.model.layers[layer].self_attn, ours, cfg


def hf_eager(attn, cfg, q, k, v, pad_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Hugging Face's `eager_attention_forward` (sinks) under the mask its model builds for the
    layer (`create_causal_mask` / `create_sliding_window_causal_mask`). q [b, nh, s, hd],
    k / v [b, nkv, s, hd] -> [b, s, nh, hd]."""
    from transformers import masking_utils
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    b, _, s, _ = q.shape
    make = (
        masking_utils.create_sliding_window_causal_mask
        if cfg.layer_types[attn.layer_idx] == "sliding_attention"
        else masking_utils.create_causal_mask
    )
    embeds = torch.zeros(b, s, cfg.hidden_size)
    mask = make(cfg, embeds, pad_mask, past_key_values=None, position_ids=torch.arange(s)[None])
    out, _ = eager_attention_forward(attn, q, k, v, mask, scaling=attn.scaling)
    return out


def hf_reference(model_dir: Path, data) -> dict[str, torch.Tensor]:
    """`scenario.hf_reference` with HF's eager attention (the sinks' path) asked for by name, and
    the routers' smallest top-2 margin."""
    import transformers

    from clipo_testkit.nemo_rl.real_worker import scenario

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    lp = torch.zeros(data["input_ids"].shape, dtype=torch.float64)
    pooled, logits = [], []
    for layer in hf.model.layers:  # every router's logits, for the near-tie check
        layer.mlp.router.register_forward_hook(lambda _m, _i, o: logits.append(o[0]))
    with torch.no_grad():
        for i in range(scenario.B):
            n = int(data["input_lengths"][i])
            ids = data["input_ids"][i : i + 1, :n]
            out = hf(ids, output_hidden_states=True)
            logp = out.logits[0, :-1].double().log_softmax(-1)
            lp[i, 1:n] = logp.gather(-1, ids[0, 1:, None])[:, 0]
            pooled.append(out.hidden_states[-1][0][data["token_mask"][i, :n].bool()].mean(0))
    top = torch.cat(logits).topk(3, dim=-1).values  # [tokens, 3]
    return {
        "logprobs": lp,
        "pooled": torch.stack(pooled),
        # the smallest gap between a token's 2nd and 3rd expert logit: top-2 routing flips
        # under a rounding difference (fp64 router in the recipe, fp32 in HF) only below ~1e-6
        "router_gap": float((top[:, 1] - top[:, 2]).min()),
    }


def _bridge_model(model_dir: str):
    from megatron.bridge import AutoBridge
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.process_groups_config import ProcessGroupCollection

    torch.distributed.init_process_group("gloo")
    parallel_state.initialize_model_parallel()
    tensor_parallel.model_parallel_cuda_manual_seed(1)
    bridge = AutoBridge.from_hf_pretrained(model_dir)
    provider = bridge.to_megatron_provider(load_weights=False)  # CPU spec: cpu_patches
    provider.params_dtype, provider.bf16, provider.pipeline_dtype = (
        torch.float32,
        False,
        torch.float32,
    )
    provider.finalize()
    provider._pg_collection = ProcessGroupCollection.use_mpu_process_groups()
    model = provider.provide()
    bridge.load_hf_weights([model])
    return model.eval()


@torch.no_grad()
def bridge_forward(rank: int, world: int, model_dir: str, pooled_layer: int = -1) -> dict:
    """The tiny gpt-oss through Bridge's AutoBridge into Megatron-Core's GPTModel: per row of
    `scenario.batch`, token logprobs and the mean over the response tokens of what CLIPO's
    `find_final_norm` gives (`pooled_layer` >= 0: that decoder layer's output instead, a mutation),
    row by row (padded) and as one packed THD stream."""
    import transformers
    from megatron.core.packed_seq_params import PackedSeqParams

    from clipo_megatron.megatron.pooling.final_norm import find_final_norm
    from clipo_testkit.nemo_rl.real_worker import scenario

    model = _bridge_model(model_dir)
    cap: dict[str, torch.Tensor] = {}
    module = find_final_norm(model) if pooled_layer < 0 else model.decoder.layers[pooled_layer]
    module.register_forward_hook(
        lambda _m, _i, o: cap.__setitem__("h", o[0] if isinstance(o, tuple) else o)
    )
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    data = scenario.batch(tok.pad_token_id, len(tok))
    lens = data["input_lengths"].tolist()
    seqs = [data["input_ids"][i, :n] for i, n in enumerate(lens)]
    res: dict[str, Any] = {"data": data}
    for mode in ("padded", "packed"):
        lp = torch.zeros(data["input_ids"].shape, dtype=torch.float64)
        pooled = []
        if mode == "padded":
            outs = []
            for ids in seqs:
                logits = model(ids[None], torch.arange(len(ids))[None], None)
                outs.append((logits[0], cap["h"][:, 0]))
        else:
            cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
            psp = PackedSeqParams(
                qkv_format="thd",
                cu_seqlens_q=cu,
                cu_seqlens_kv=cu,
                cu_seqlens_q_padded=cu,
                cu_seqlens_kv_padded=cu,
                max_seqlen_q=max(lens),
                max_seqlen_kv=max(lens),
            )
            stream, pos = torch.cat(seqs)[None], torch.cat([torch.arange(n) for n in lens])[None]
            logits = model(stream, pos, None, packed_seq_params=psp)
            h = cap["h"].reshape(-1, cap["h"].shape[-1])
            outs = [(logits[0, a:b], h[a:b]) for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())]
        for i, (logits, h) in enumerate(outs):
            n, ids = lens[i], seqs[i]
            lp[i, 1:n] = logits[:-1].double().log_softmax(-1).gather(-1, ids[1:, None])[:, 0]
            pooled.append(h[data["token_mask"][i, :n].bool()].mean(0))
        res[mode] = {"logprobs": lp, "pooled": torch.stack(pooled)}
    return res


def worker_on_off(rank: int, world: int, out_dir: str, model_dir: str, packing: bool) -> dict:
    """NeMo-RL's own MegatronPolicyWorker with the CLIPO extension on the tiny gpt-oss: the real
    `get_logprobs` before `clipo_setup` (CLIPO off: no hook), then with CLIPO's pooler (on)."""
    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY
    from clipo_testkit.nemo_rl.real_worker import build, scenario

    out, model = Path(out_dir), Path(model_dir)
    policy = build.contract_policy(model, out, dp=world, packing=packing)
    worker = build.build_worker(policy, dp=world)
    tok = worker.tokenizer
    data = scenario.batch(tok.pad_token_id, len(tok))
    kw = {"sequence_packing_args": scenario.packing_args(policy)} if packing else {}
    shard = data.shard_by_batch_size(world, batch_size=None, **kw)
    shard = (shard[0] if isinstance(shard, tuple) else shard)[rank]
    core = worker.model.module if hasattr(worker.model, "module") else worker.model
    calls = {"thd": 0, "all": 0}

    def count(_m, args, kwargs):  # did NeMo-RL hand the attention a packed (THD) stream?
        calls["all"] += 1
        calls["thd"] += (kwargs.get("packed_seq_params") or (args[6:] or [None])[0]) is not None

    for m in core.modules():
        if type(m).__name__ == "SinkWindowAttention":
            m.register_forward_pre_hook(count, with_kwargs=True)
    res: dict[str, Any] = {"off": worker.get_logprobs(data=shard)["logprobs"].double()}
    res["calls"] = calls
    res["attention"] = sorted(
        {type(m).__name__ for m in core.modules() if "Attention" in type(m).__name__}
    )
    worker.clipo_setup(clipo_cfg=scenario.CLIPO)
    res["on"] = worker.get_logprobs(data=shard)["logprobs"].double()
    res["rows"] = shard[SAMPLE_IDX_KEY].clone()
    res["lengths"] = shard["input_lengths"].clone()
    res["pooled_rows"] = head_state(worker).rows.cpu().clone()
    res["pooled"] = head_state(worker).pooled.detach().cpu().clone()
    return res
