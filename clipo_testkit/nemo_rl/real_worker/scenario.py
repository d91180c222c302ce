# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""What each rank runs: NeMo-RL's real worker methods, compared with Hugging Face by hand.

One rank-function (`worker_methods`) builds the product's worker through NeMo-RL's real `__init__`
and runs, in order, the real `get_logprobs` with the CLIPO pooler hooked, the real `train` (one
global batch, NeMo-RL's `NLLLossFn`), `save_checkpoint` + the head's checkpoint, and (`resumed_worker`, a fresh process) a
worker built from that checkpoint (NeMo-RL resumes by construction with `weights_path`). It returns
numbers; the test compares them. References are computed on the Hugging Face model in this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from clipo_testkit.nemo_rl.inspection import head_state

B, MAX_LEN = 8, 40
CLIPO = {"method": {"embed_dim": 16, "seed": 7}}
# verifier verdicts and prompt groups of the B rows: two groups of 4, each with >= 2 correct and
# >= 1 incorrect rollout, so both count anchors and r_CL is non-zero on their incorrect rows
CORRECT = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])


def packing_args(policy: dict[str, Any]) -> dict[str, Any]:
    """The driver's sequence-packing arguments for `shard_by_batch_size` (lm_policy's), 2048-token bins."""
    return {
        "algorithm": policy["sequence_packing"]["algorithm"],
        "input_key": "input_ids",
        "input_lengths_key": "input_lengths",
        "sequence_length_pad_multiple": policy["make_sequence_length_divisible_by"],
        "max_tokens_per_microbatch": 2048,
    }


def batch(pad_id: int, vocab: int, empty_rows: tuple[int, ...] = ()):
    """B rows of prompt + response (random tokens), varied lengths; token_mask = the response.
    `empty_rows`: those rows end after their prompt with no response token (a failed
    generation's empty response, as NeMo-RL's async rollout returns it)."""
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY

    gen = torch.Generator().manual_seed(11)
    lengths = torch.randint(12, MAX_LEN + 1, (B,), generator=gen)
    prompts = torch.randint(4, 9, (B,), generator=gen)
    ids = torch.full((B, MAX_LEN), pad_id)
    mask = torch.zeros(B, MAX_LEN)
    for i in range(B):
        n = int(lengths[i])
        ids[i, :n] = torch.randint(3, vocab, (n,), generator=gen)
        mask[i, int(prompts[i]) : n] = 1.0
    for i in empty_rows:
        lengths[i] = prompts[i]
        ids[i, int(prompts[i]) :] = pad_id
        mask[i] = 0.0
    return BatchedDataDict(
        input_ids=ids,
        input_lengths=lengths,
        token_mask=mask,
        sample_mask=torch.ones(B),
        **{SAMPLE_IDX_KEY: torch.arange(B)},
    )


@torch.no_grad()
def hf_reference(model_dir: Path, data) -> dict[str, torch.Tensor]:
    """Per row: token logprobs [B, S] (0 at position 0 and past the length) and the mean of the
    final-norm states over the response tokens [B, H], from Hugging Face's model (fp32)."""
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    lp = torch.zeros(data["input_ids"].shape, dtype=torch.float64)
    pooled = []
    for i in range(B):
        n = int(data["input_lengths"][i])
        ids = data["input_ids"][i : i + 1, :n]
        out = hf(ids, output_hidden_states=True)
        lp[i, 1:n] = out.logits[0, :-1].double().log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        resp = data["token_mask"][i, :n].bool()
        pooled.append(out.hidden_states[-1][0][resp].mean(0))
    return {"logprobs": lp, "pooled": torch.stack(pooled)}


def hf_train_reference(model_dir: Path, data, lr: float, max_norm: float) -> dict[str, Any]:
    """NeMo-RL's NLL loss (sum of masked token NLL / valid tokens) on the whole batch by hand, its
    gradient norm, and one Adam step (no weight decay on norms) of the final norm's weight."""
    import transformers

    hf: Any = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    total, toks = torch.zeros(()), float(data["token_mask"][:, 1:].sum())
    for i in range(B):
        n = int(data["input_lengths"][i])
        ids = data["input_ids"][i : i + 1, :n]
        lp = hf(ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        total = total + -(lp * data["token_mask"][i, 1:n]).sum() / toks
    total.backward()
    norm = torch.sqrt(sum(((p.grad.double() ** 2).sum() for p in hf.parameters()), torch.zeros(())))
    coeff = min(1.0, max_norm / (float(norm) + 1e-6))
    w = hf.model.norm.weight
    g = w.grad * coeff
    step = w.detach() - lr * g / (g.abs() + 1e-8)  # Adam's first step: m_hat / sqrt(v_hat) = sign
    return {"loss": float(total), "grad_norm": float(norm), "norm_weight": step}


def final_norm_weight(worker) -> torch.Tensor:
    from clipo_megatron.megatron.pooling.microbatch_pooler import find_final_norm

    norm: Any = find_final_norm(worker.model)
    return norm.weight.detach().cpu().clone()  # .cpu(): untagged


def _state(worker) -> dict[str, torch.Tensor]:
    return {
        k: v.detach().cpu().clone()
        for k, v in worker.model.state_dict().items()
        if isinstance(v, torch.Tensor) and not k.endswith("_extra_state")
    }


def policy_paths(step_dir: Path) -> dict[str, str]:
    """Where NeMo-RL keeps a step's policy (`<step>/policy/weights`, `.../optimizer`), as the
    keyword arguments of `save_checkpoint` and of the worker's resume by construction."""
    policy = step_dir / "policy"
    return {"weights_path": str(policy / "weights"), "optimizer_path": str(policy / "optimizer")}


def refusal_without_final_norm(worker) -> str:
    """`clipo_setup` on NeMo-RL's own worker whose model lost its final norm: the one line it
    raises (the norm is put back after; no head may have been built)."""
    from megatron.core.utils import unwrap_model

    from clipo_megatron.megatron.pooling.final_norm import FinalNormNotFound

    decoder = unwrap_model(list(worker.model) if isinstance(worker.model, list) else [worker.model])
    decoder = decoder[-1].decoder
    norm, decoder.final_layernorm = decoder.final_layernorm, None
    try:
        worker.clipo_setup(clipo_cfg=CLIPO)
    except FinalNormNotFound as e:
        return str(e)
    finally:
        decoder.final_layernorm = norm
    return "clipo_setup did not refuse"


def worker_methods(
    rank: int, world: int, out_dir: str, model_dir: str, checkpoint: bool = True
) -> dict[str, Any]:
    from nemo_rl.algorithms.loss.loss_functions import NLLLossFn

    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY
    from clipo_testkit.nemo_rl.real_worker import build

    out, model = Path(out_dir), Path(model_dir)
    policy = build.contract_policy(model, out, dp=world)
    worker = build.build_worker(policy, dp=world)
    assert worker._clipo_iterator_module.__name__.endswith("megatron_policy_worker")
    res: dict[str, Any] = {"rank": rank, "refusal": refusal_without_final_norm(worker)}
    res["head_after_refusal"] = head_state(worker) is not None
    worker.clipo_setup(clipo_cfg=CLIPO)
    tok = worker.tokenizer
    data = batch(tok.pad_token_id, len(tok))
    pack = packing_args(policy)

    # get_logprobs: the driver's packing shard (lm_policy._shard_for_logprob), this rank's shard
    shards, _ = data.shard_by_batch_size(
        world,
        batch_size=None,
        sequence_packing_args=pack,
    )
    shard = shards[rank]
    lp = worker.get_logprobs(data=shard)["logprobs"]
    res["rows"] = shard[SAMPLE_IDX_KEY].clone()
    res["logprobs"] = lp.double()
    res["lengths"] = shard["input_lengths"].clone()
    res["pooled_rows"] = head_state(worker).rows.cpu().clone()
    res["pooled"] = head_state(worker).pooled.detach().cpu().clone()

    # train: one global batch (gbs = B), packed, NeMo-RL's NLL loss
    before = _state(worker)
    shards = data.shard_by_batch_size(world, batch_size=B, sequence_packing_args=pack)
    shards = shards[0] if isinstance(shards, tuple) else shards
    train_out = worker.train(data=shards[rank], loss_fn=NLLLossFn(), gbs=B, mbs=B // world)
    res["train"] = {
        "loss": float(train_out["global_loss"].sum()),
        "grad_norm": float(train_out["grad_norm"][0]),
        "lr": float(train_out["all_mb_metrics"]["lr"][0]),
    }
    res["norm_weight"] = final_norm_weight(worker)
    after = _state(worker)
    res["moved"] = sum(not torch.equal(before[k], after[k]) for k in after)

    res["state_before"], res["state_after"] = before, after
    if not checkpoint:
        return res
    # checkpoint: NeMo-RL's save (Bridge's torch_dist), the head beside it; resume by construction
    step_dir = out / "ckpt" / "step_1"
    worker.save_checkpoint(**policy_paths(step_dir))
    worker.clipo_save_head(step_dir=str(step_dir), extra={"step": 1})
    res["head"] = worker.clipo_head_state()["head"]
    return res


def resumed_worker(rank: int, world: int, out_dir: str, model_dir: str) -> dict[str, Any]:
    """A fresh worker (new process, as a resumed run's new Ray actors) built from the checkpoint."""
    from clipo_testkit.nemo_rl.real_worker import build

    out = Path(out_dir)
    policy = build.contract_policy(Path(model_dir), out, dp=world)
    step_dir = out / "ckpt" / "step_1"
    worker = build.build_worker(policy, dp=world, **policy_paths(step_dir))
    worker.clipo_setup(clipo_cfg=CLIPO)
    extra = worker.clipo_load_head(step_dir=str(step_dir))
    return {"state": _state(worker), "head": worker.clipo_head_state()["head"], "extra": extra}
