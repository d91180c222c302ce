# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Verifier throughput on the authors' ground truths: in-process vs the process pool.

    python bench/bench_eval.py [--data-dir ../shared/data/clipo] [--workers 2] [--size 2000]

Responses are built from the ground truths (half right, half wrong, a quarter
without a box) so math-verify does its real parsing work. Generation
throughput is printed by `clipo-megatron eval` itself.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="../shared/data/clipo")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--size", type=int, default=2000)
    args = ap.parse_args()
    from clipo_megatron.data import load_dataset
    from clipo_megatron.verify.pool import VerifierPool, grade_one

    recs = []
    for name in ("math500", "gsm8k", "theoremqa", "mmlu"):
        recs += load_dataset(name, data_dir=args.data_dir)
    recs = (recs * (args.size // len(recs) + 1))[: args.size]
    responses = [
        f"... so \\boxed{{{r.ground_truth}}}"
        if i % 2 == 0
        else ("no box at all" if i % 4 == 1 else "\\boxed{7}")
        for i, r in enumerate(recs)
    ]
    gts, kinds = [r.ground_truth for r in recs], [r.kind for r in recs]

    t = time.perf_counter()
    serial = [grade_one(a, b, c) for a, b, c in zip(responses, gts, kinds)]
    dt_serial = time.perf_counter() - t
    with VerifierPool(args.workers) as pool:
        t = time.perf_counter()
        pool._executor()
        dt_start = time.perf_counter() - t
        t = time.perf_counter()
        pooled = [v.score for v in pool.grade(responses, gts, kinds)]
        dt_pool = time.perf_counter() - t
    assert pooled == serial, "pool and in-process verdicts differ"
    print(
        f"{len(recs)} answers (math500/gsm8k/theoremqa/mmlu ground truths), {sum(serial):.0f} judged right"
    )
    print(f"in-process (main thread, no timeout): {len(recs) / dt_serial:8.0f} answers/s")
    print(
        f"pool, {args.workers} workers (timeout per answer): {len(recs) / dt_pool:8.0f} answers/s "
        f"(+ {dt_start:.2f} s start-up, once)"
    )


if __name__ == "__main__":
    main()
