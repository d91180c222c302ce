# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""NeMo-RL's own microbatches (`ProcessedMicrobatch`) through the CPU policy model.

Why: the recipes pack sequences (`policy.sequence_packing.enabled: true`). The
CPU policy worker reads its microbatches from NeMo-RL's
`nemo_rl.models.megatron.data.get_microbatch_iterator`, so NeMo-RL's bins,
sorting, per-sequence padding and `cu_seqlens_padded` meet the CLIPO pooler
(`megatron.microbatch_pooler`, its packed branch) exactly as on the GPU. What
is CPU-only here, and why it is faithful:

- device moves: NeMo-RL's iterator calls `data_dict.to("cuda")` on each
  microbatch; `host_device_moves()` keeps those on the host for the duration
  (the one seam where an emulated-CUDA test mode plugs in instead);
- THD attention: Megatron-Core's local (no TransformerEngine) attention has
  no packed kernel, so the packed stream [1, T] runs as ONE row with a
  block-diagonal causal mask over the `cu_seqlens_padded` slots and per-slot
  positions (RoPE via `shared_prefix.packed_rope`). Each token sees exactly
  the keys and positions it sees unpacked, and the final norm sees the stream
  as [T, 1, H], the GPU worker's THD layout;
- unpacking: NeMo-RL's `from_parallel_logits_to_logprobs_packed_sequences`
  turns the packed logits into its [b, S] layout, as its `LogprobsPostProcessor` does.

main at 7ea279a imports Megatron-Bridge's `packed_seq_utils` in that module
(used only by CP > 1 router replay); Megatron-Bridge needs CUDA, so
`ensure_megatron_bridge_stub()` stands in a module whose function refuses.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch

from clipo_megatron.megatron.policy_passes import forward_logits, token_logprobs
from clipo_megatron.megatron.shared_prefix import packed_rope

_BRIDGE = "megatron.bridge.training.utils.packed_seq_utils"


def ensure_megatron_bridge_stub() -> None:
    """Make `from megatron.bridge.training.utils.packed_seq_utils import ...` work without Megatron-Bridge."""
    try:
        __import__(_BRIDGE)
        return
    except ImportError:
        pass

    def get_packed_seq_cp_partition_indices(*_: Any, **__: Any):
        raise NotImplementedError("Megatron-Bridge is not installed: CP > 1 runs on GPUs only")

    parts = _BRIDGE.split(".")
    for i in range(2, len(parts) + 1):
        name = ".".join(parts[:i])
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[_BRIDGE].get_packed_seq_cp_partition_indices = get_packed_seq_cp_partition_indices  # type: ignore[attr-defined]


@contextlib.contextmanager
def host_device_moves():
    """`BatchedDataDict.to("cuda")` stays on the host inside the block (CPU worker only)."""
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    original = BatchedDataDict.to

    def to(self, device):
        return original(self, "cpu" if torch.device(device).type == "cuda" else device)

    BatchedDataDict.to = to
    try:
        yield
    finally:
        BatchedDataDict.to = original


def packed_layout(cu_seqlens_padded: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions [1, T], attention mask [1, 1, T, T] bool, True = masked) of a packed stream.

    Slot i is [cu[i], cu[i+1]); a token attends causally within its slot only and its
    position restarts at 0 there, as the THD kernel treats each slot as its own sequence.
    """
    cu = cu_seqlens_padded.long().cpu()
    if int(cu[-1]) != total:
        raise ValueError(f"cu_seqlens_padded ends at {int(cu[-1])}, the packed stream has {total}")
    t = torch.arange(total)
    slot = torch.searchsorted(cu[1:], t, right=True)  # [T]
    pos = t - cu[slot]
    allowed = (slot[:, None] == slot[None, :]) & (t[None, :] <= t[:, None])  # [T, T]
    return pos.unsqueeze(0), ~allowed.view(1, 1, total, total)


def microbatch_logprobs(model, mb, *, tp_group) -> torch.Tensor:
    """A `ProcessedMicrobatch` -> token logprobs [b, S] in NeMo-RL's unpacked layout (0 at position 0).

    `tp_group`: Megatron's tensor-parallel group (size 1 here; not None, which would be the
    world group and reduce over DP ranks).
    """
    ids = mb.input_ids_cp_sharded if mb.input_ids_cp_sharded is not None else mb.input_ids
    if mb.cu_seqlens_padded is None:  # padded rows [b, S]
        return token_logprobs(forward_logits(model, ids), ids)
    from nemo_rl.distributed.model_utils import from_parallel_logits_to_logprobs_packed_sequences

    pos, mask = packed_layout(mb.cu_seqlens_padded, ids.shape[1])
    with packed_rope(model, pos):
        logits = model(ids, pos, mask)  # [1, T, V]; the final norm saw [T, 1, H]
    lp = from_parallel_logits_to_logprobs_packed_sequences(
        logits.float(),
        target=mb.input_ids,
        cu_seqlens_padded=mb.cu_seqlens_padded,
        unpacked_seqlen=mb.data_dict["input_ids"].shape[1],
        vocab_start_index=0,
        vocab_end_index=logits.shape[-1],
        group=tp_group,
        inference_only=not torch.is_grad_enabled(),
    )  # [b, S-1]
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], 1)


def nemo_rl_microbatches(iterator_module: Any, data, cfg: dict, mbs: int) -> tuple[Iterator, int]:
    """(NeMo-RL's `ProcessedMicrobatch` iterator, padded seq length) over `data`.

    `iterator_module.get_microbatch_iterator` is looked up at call time (NeMo-RL's worker
    does the same with its module global): the CLIPO mixin tees it for one call.
    """
    it, _n, _mbs, seq_len, _padded = iterator_module.get_microbatch_iterator(
        data, cfg, mbs, straggler_timer=None
    )
    return it, int(seq_len)
