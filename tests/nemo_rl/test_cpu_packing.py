# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The CPU worker's logprob pass over NeMo-RL's own packed microbatches equals the unpacked pass.

NeMo-RL shards the batch into packing bins (`shard_by_batch_size(sequence_packing_args=)`, rows
sorted), its `get_microbatch_iterator` packs each bin into one [1, T] stream with per-row slots
padded to `make_sequence_length_divisible_by` (`cu_seqlens_padded`), and `Policy.get_logprobs`
restores the row order (`reorder_data`). Through the CPU worker (block-diagonal causal mask,
per-slot positions) the logprobs and the CLIPO pooled states must equal the unpacked pass row
for row: fp32, tolerance 1e-5 absolute (values of order 1-10, a few ulp after the different
reduction orders of T x T vs S x S attention).
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.nemo_rl

MB_TOKENS = 96  # a few rows per bin: several bins, the rows sorted across them


def _config(model_dir, packed: bool) -> dict:
    return {
        "model_name": str(model_dir),
        "seed": 0,
        "logprob_batch_size": 2,
        "train_global_batch_size": 6,
        "train_micro_batch_size": 2,
        "make_sequence_length_divisible_by": 8,
        "dynamic_batching": {"enabled": False},
        "sequence_packing": {
            "enabled": packed,
            "logprob_mb_tokens": MB_TOKENS,
            "train_mb_tokens": MB_TOKENS,
            "algorithm": "modified_first_fit_decreasing",
        },
        "megatron_cfg": {
            "tensor_model_parallel_size": 1,
            "pipeline_model_parallel_size": 1,
            "context_parallel_size": 1,
            "sequence_parallel": False,
            "optimizer": {"lr": 1e-4},
        },
    }


def _batch(b: int = 6):
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY

    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([23, 9, 31, 14, 27, 18])[:b]
    prompt = torch.tensor([5, 3, 9, 4, 6, 2])[:b]
    s = 40  # right-padded width, a multiple of 8
    ids = torch.zeros(b, s, dtype=torch.long)
    mask = torch.zeros(b, s)
    for i in range(b):
        ids[i, : lengths[i]] = torch.randint(3, 60, (int(lengths[i]),), generator=gen)
        mask[i, prompt[i] : lengths[i]] = 1
    return BatchedDataDict(
        {
            "input_ids": ids,
            "input_lengths": lengths,
            "token_mask": mask,
            "sample_mask": torch.ones(b),
            SAMPLE_IDX_KEY: torch.arange(b),
        }
    )


def _run(worker, data, packed: bool):
    """(logprobs [B, S] in batch order, pooled [B, H] in batch order, final-norm input shapes)."""
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    from clipo_megatron.nemo_rl.worker import find_final_norm

    worker.cfg["sequence_packing"]["enabled"] = packed
    shapes = []
    hook = find_final_norm(worker.model).register_forward_hook(
        lambda _m, _i, out: shapes.append(tuple(out.shape))
    )
    try:
        if packed:  # what Policy.get_logprobs does around the worker call
            args = {
                "algorithm": "modified_first_fit_decreasing",
                "input_key": "input_ids",
                "input_lengths_key": "input_lengths",
                "sequence_length_pad_multiple": 8,
                "max_tokens_per_microbatch": MB_TOKENS,
            }
            shards, order = data.shard_by_batch_size(1, batch_size=None, sequence_packing_args=args)
            out = worker.get_logprobs(data=shards[0])
            lp = BatchedDataDict.from_batches([out])
            assert order != sorted(order), "the bins did not reorder the rows: test too weak"
            lp.reorder_data(order)
        else:
            lp = worker.get_logprobs(data=data)
    finally:
        hook.remove()
    rows, pooled = worker._clipo.rows, worker._clipo.pooled
    return lp["logprobs"], pooled[torch.argsort(rows)], shapes


def test_packed_logprobs_and_pooled_states_equal_unpacked(tmp_path):
    pytest.importorskip("nemo_rl.models.megatron")
    from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
    from tests.tiny_models import save_tiny_llama

    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    from clipo_megatron.nemo_rl.cpu_worker import ClipoCpuPolicyWorkerImpl

    worker = ClipoCpuPolicyWorkerImpl(_config(save_tiny_llama(tmp_path / "m"), True))
    try:
        worker.clipo_setup(
            clipo_cfg=ClipoNemoRLConfig.from_dict({"method": {"embed_dim": 8}}).to_dict()
        )
        data = _batch()
        lp_packed, pooled_packed, packed_shapes = _run(worker, data, True)
        lp_plain, pooled_plain, plain_shapes = _run(worker, data, False)
    finally:
        worker.shutdown()
    # the final norm saw NeMo-RL's packed streams [T, 1, H] (T a multiple of 8), then [S, b, H]
    assert len(packed_shapes) > 1 and all(s[1] == 1 and s[0] % 8 == 0 for s in packed_shapes)
    assert all(s[0] == 40 and s[1] == 2 for s in plain_shapes)
    valid = torch.arange(40)[None, :] < data["input_lengths"][:, None]  # [B, S]
    assert lp_packed.shape == lp_plain.shape == (6, 40)
    torch.testing.assert_close(lp_packed[valid], lp_plain[valid], rtol=0, atol=1e-5)
    assert float(lp_plain[valid].abs().max()) > 1.0  # real logprobs, not zeros
    torch.testing.assert_close(pooled_packed, pooled_plain, rtol=0, atol=1e-5)
