# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The NeMo-RL worker's head checkpoint moves between layouts (`megatron.head_checkpoint`).

Two gloo ranks. A TP-sharded head trained one CLIPO step at TP 1 is saved, loaded at TP 2
(each rank's slice of W and of its AdamW moments), stepped again beside the TP 1 head (same
rewards, same weights), saved at TP 2 and loaded back at TP 1 (the TP 1 head's state after two
steps), and loaded into a replicated head.
Saved per rank, the TP 1 file would have no rank-1 half and the TP 2 save would come back as
half a head at TP 1: both go red here.
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from .dist_utils import run_distributed  # noqa: E402

pytestmark = [pytest.mark.mcore, pytest.mark.multiprocess]

D, EMBED, B = 12, 8, 16


def _inputs():
    gen = torch.Generator().manual_seed(3)
    pooled = torch.randn(B, D, generator=gen)  # [B, D]
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0])  # every group valid
    gids = torch.arange(4).repeat_interleave(4)  # [B]: 4 groups of 4
    w0 = torch.randn(EMBED, D, generator=gen) * 0.3  # [d, D] the full W
    return pooled, correct, gids, w0


def _state(group, tp: int, w_full: torch.Tensor, *, sharded: bool = True):
    """A ClipoWorkerState over a head of TP size `tp` holding its slice of `w_full`."""
    import torch.distributed as dist

    from clipo_megatron.megatron.head import build_contrastive_head
    from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
    from clipo_megatron.nemo_rl.worker import ClipoWorkerState
    from clipo_testkit.parallel_checks import _model_config

    cfg = ClipoNemoRLConfig.from_dict({"method": {"embed_dim": EMBED, "seed": 7}})
    head = build_contrastive_head(
        _model_config(tp), input_size=D, embed_dim=EMBED, tensor_parallel=sharded, tp_group=group
    )
    rank = dist.get_rank(group) if sharded else 0
    with torch.no_grad():
        head.proj.weight.copy_(w_full.chunk(tp if sharded else 1, 0)[rank])
    return ClipoWorkerState(cfg, head)


def _full(state, group) -> dict[str, np.ndarray]:
    from clipo_megatron.megatron.head_checkpoint import full_trainer_state

    full = full_trainer_state(state.trainer, group)
    moments = full["optimizer"]["state"][0]
    return {
        "w": full["head"]["proj.weight"].numpy(),
        "exp_avg": moments["exp_avg"].numpy(),
        "exp_avg_sq": moments["exp_avg_sq"].numpy(),
        "step": np.array([float(moments["step"])]),
    }


def _step(state, pooled, correct, gids, step: int, rows: torch.Tensor) -> np.ndarray:
    state.record(rows, pooled[rows])
    out = state.head_step(correct, gids, step)
    return out["rewards"].numpy()


def _ranks(rank: int, world: int, root: str) -> dict:
    import os

    import torch.distributed as dist

    pooled, correct, gids, w0 = _inputs()
    singles = [dist.new_group([r]) for r in range(world)]  # every rank makes every group
    one, both = singles[rank], dist.group.WORLD
    rows = torch.arange(B)
    res: dict = {}

    tp1 = _state(one, 1, w0)
    _step(tp1, pooled, correct, gids, 0, rows)
    tp1.save(os.path.join(root, "tp1"), writer=rank == 0, tp_group=one, extra={"step": 1})
    dist.barrier()

    tp2 = _state(both, world, torch.zeros_like(w0))  # loaded over, not initialised alike
    assert tp2.load(os.path.join(root, "tp1"), tp_group=both) == {"step": 1}
    res["loaded_tp2"] = _full(tp2, both)
    res["tp1_after_1"] = _full(tp1, one)
    res["rewards_tp1"] = _step(tp1, pooled * 1.5, correct, gids, 1, rows)
    res["rewards_tp2"] = _step(tp2, pooled * 1.5, correct, gids, 1, rows)
    res["tp1_after_2"], res["tp2_after_2"] = _full(tp1, one), _full(tp2, both)

    tp2.save(os.path.join(root, "tp2"), writer=rank == 0, tp_group=both, extra={"step": 2})
    dist.barrier()
    back = _state(one, 1, torch.zeros_like(w0))
    assert back.load(os.path.join(root, "tp2"), tp_group=one) == {"step": 2}
    res["tp2_at_tp1"] = _full(back, one)
    replicated = _state(None, 1, torch.zeros_like(w0), sharded=False)
    replicated.load(os.path.join(root, "tp2"), tp_group=both)
    res["replicated"] = _full(replicated, None)
    return res


def _close(a: dict, b: dict, atol: float) -> None:
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=atol, err_msg=k)


def test_head_checkpoint_moves_between_tp_sizes(tmp_path):
    out = run_distributed(_ranks, 2, str(tmp_path))
    for rank, res in out.items():
        # a load is a copy: exact
        _close(res["loaded_tp2"], res["tp1_after_1"], 0)
        # TP 2 splits the Gram's sum over d into two all-reduced halves: fp32 rounding, a few ulp
        # of values of order 1 (rewards in [-0.5, 0], weights ~0.3)
        np.testing.assert_allclose(res["rewards_tp2"], res["rewards_tp1"], rtol=0, atol=1e-6)
        _close(res["tp2_after_2"], res["tp1_after_2"], 1e-6)
        _close(res["tp2_at_tp1"], res["tp2_after_2"], 0)
        _close(res["replicated"], res["tp2_after_2"], 0)
        assert res["tp1_after_2"]["step"][0] == 2.0, rank
    moved = np.abs(out[0]["tp1_after_2"]["w"] - out[0]["tp1_after_1"]["w"]).max()
    assert moved > 1e-4, moved  # the second step trained the head: the comparison has teeth
