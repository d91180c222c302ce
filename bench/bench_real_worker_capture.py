# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO's cost on NeMo-RL's real Megatron worker, in one run: get_logprobs with the pooler hooked
vs without (a ratio), and the head step beside it.

One rank (or TP ranks with sequence parallel, `--tp`), CPU, fp32, the worker built by NeMo-RL's real
`__init__` (clipo_testkit/nemo_rl/real_worker):
the same packed batch through the product's `get_logprobs` with `clipo_sample_idx` (the mixin tees
NeMo-RL's microbatch iterator and hooks the final norm) and without it (the mixin hands the call
straight to NeMo-RL's), alternated `--repeats` times so both see the same machine load; then the
head step (`clipo_head_step`: DP gather, contrastive loss, rewards, one AdamW step).

    NEMO_RL_SRC=.. BRIDGE_SRC=.. MEGATRON_LM_SRC=.. \
      bash scripts/test_nemo_rl.sh --bench [--rows 64] [--repeats 7] [--tp 2]

(`--bench` runs this file with the real-worker environment instead of pytest.)
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path


def measure(rank: int, world: int, out_dir: str, model_dir: str, rows: int, repeats: int, layout):
    import torch

    from clipo_megatron.nemo_rl.worker import SAMPLE_IDX_KEY
    from clipo_testkit.nemo_rl.real_worker import scenario
    from clipo_testkit.nemo_rl.real_worker.layouts import _build

    policy, worker = _build(Path(out_dir), Path(model_dir), layout)  # NeMo-RL's real __init__
    scenario.B = rows  # a larger batch than the tests'
    data = scenario.batch(worker.tokenizer.pad_token_id, len(worker.tokenizer))
    pack = scenario.packing_args(policy)
    with_idx = data.shard_by_batch_size(1, batch_size=None, sequence_packing_args=pack)[0][0]
    without = copy.copy(with_idx)  # same bins (UserDict copy keeps the packing attributes)
    del without[SAMPLE_IDX_KEY]  # no row ids: the mixin hands the call to NeMo-RL's unchanged
    times: dict[str, list[float]] = {"plain": [], "pooled": [], "head": []}
    correct = (torch.arange(rows) % 3 != 0).float()
    groups = torch.arange(rows) // 8
    worker.get_logprobs(data=with_idx)  # warm-up
    for step in range(repeats):
        for name, batch in (("plain", without), ("pooled", with_idx)):
            t0 = time.perf_counter()
            worker.get_logprobs(data=batch)
            times[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        worker.clipo_head_step(correct=correct, group_ids=groups, step=step + 1)
        times["head"].append(time.perf_counter() - t0)
    return {"times": times, "tokens": int(data["input_lengths"].sum())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tp", type=int, default=1, help="TP size (with sequence parallel when > 1)")
    args = ap.parse_args()
    from clipo_testkit.nemo_rl.real_worker.build import requirements

    missing = requirements()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    import os

    from clipo_testkit.nemo_rl.real_worker import build
    from clipo_testkit.nemo_rl.real_worker.layouts import Layout
    from clipo_testkit.nemo_rl.real_worker.spawn import run_ranks

    layout = Layout(tp=args.tp, sp=args.tp > 1)

    os.environ["NEMO_RL_ROOT"] = os.environ["NEMO_RL_SRC"]
    with tempfile.TemporaryDirectory(prefix="clipo_bench_rw_") as tmp:
        model = build.tiny_model(Path(tmp) / "model")
        out = run_ranks(measure, layout.world, tmp, str(model), args.rows, args.repeats, layout)[0]
    med = {k: statistics.median(v) for k, v in out["times"].items()}
    print(
        f"\nNeMo-RL real worker, {layout.name} ({layout.world} processes), CPU fp32, "
        f"{args.rows} rows ({out['tokens']} tokens), "
        f"median of {args.repeats}"
    )
    print("| pass | median s | vs plain get_logprobs |\n|---|---|---|")
    for name in ("plain", "pooled", "head"):
        print(f"| {name} | {med[name]:.4f} | {med[name] / med['plain']:.3f} |")
    print(f"capture overhead (pooled / plain get_logprobs): {med['pooled'] / med['plain']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
