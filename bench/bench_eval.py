# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Verifier throughput on the authors' ground truths: in-process vs the process pool.

    python bench/bench_eval.py --data-dir <the authors' parquet root> [--workers 2] [--size 2000]
    python bench/bench_eval.py --smollm2 --data-dir <the authors' parquet root>

--data-dir defaults to $CLIPO_DATA_DIR (the folder with the authors' train/ and test/).

Responses are built from the ground truths (half right, half wrong, a quarter
without a box) so math-verify does its real parsing work. Generation
throughput is printed by `clipo-megatron eval` itself.

--smollm2 times the run of tests/eval/test_smollm2_eval.py (SmolLM2-135M, hf
backend, 4 GSM8K + 4 MMLU questions, 96 new tokens, 2 threads) end to end;
the test checks what it computes, this reports how long it took (budget:
180 s on an idle 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

SMOLLM2_BUDGET_S = 180.0


def smollm2_eval_seconds(data_dir: str) -> float:
    """Wall time of the test's SmolLM2 eval run (same argv), in seconds."""
    from clipo_megatron.eval.run import main as eval_main

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as out:
        argv = ["--datasets", "gsm8k,mmlu", "--model", "smollm2", "--backend", "hf"]
        argv += ["--data-dir", data_dir, "--limit", "4", "--max-tokens", "96", "--chunk", "4"]
        argv += ["--threads", "2", "--out", out, "--verify-workers", "1", "--no-progress"]
        t = time.perf_counter()
        rc = eval_main(argv)
        dt = time.perf_counter() - t
    if rc != 0:
        raise SystemExit(f"clipo-megatron eval exited with {rc}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--data-dir",
        default=os.environ.get("CLIPO_DATA_DIR"),
        help="the authors' parquet root (train/, test/); default $CLIPO_DATA_DIR",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--size", type=int, default=2000)
    ap.add_argument("--smollm2", action="store_true", help="time the SmolLM2 eval test's run")
    args = ap.parse_args()
    if not args.data_dir or not Path(args.data_dir).is_dir():
        ap.error(
            f"--data-dir {args.data_dir!r} is not a folder: pass the authors' parquet root "
            "(train/, test/) or set CLIPO_DATA_DIR"
        )
    if args.smollm2:
        dt = smollm2_eval_seconds(args.data_dir)
        verdict = "within" if dt <= SMOLLM2_BUDGET_S else "OVER"
        print(
            f"SmolLM2-135M eval (gsm8k+mmlu, 4 each, 96 tokens, 2 threads): {dt:.1f} s "
            f"({verdict} the {SMOLLM2_BUDGET_S:.0f} s budget of an idle 2-core machine)"
        )
        return
    from clipo_megatron.data import load_dataset
    from clipo_megatron.verify.graders import grade_one
    from clipo_megatron.verify.pool import VerifierPool

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
        pool.start()
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
