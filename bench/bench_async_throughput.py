# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Async GRPO (and the TransferQueue loop) against sync, CLIPO on and off: tokens per second per
step from NeMo-RL's own performance metrics, in one CPU run (a ratio, not an absolute).

Six runs of NeMo-RL's real loops through CLIPO's driver on the contract harness
(clipo_testkit/nemo_rl: NeMo-RL's Megatron worker on CPU, the contract model, the GRPO track-1 recipe
shrunk by `contract_config`): `grpo_train`, `async_grpo_train` (max_trajectory_age_steps 1) and
`grpo_train_sync` (TransferQueue, simple backend), each with CLIPO off and on; the same recipe
otherwise (no CLIPO warm-up, the importance-sampling correction on in all, as async_grpo_train
asserts), the same steps. The TransferQueue cases need TransferQueue installed (the overlay of
scripts/test_nemo_rl.sh); `--cases` picks a subset. Per step it reads what
NeMo-RL logs: `performance/tokens_per_sec` (its E2E throughput: `total_num_tokens`, prompt +
generated tokens of the rows trained, over `total_step_time`) and `timing/train/total_step_time`.

    NEMO_RL_SRC=.. bash scripts/test_nemo_rl.sh --bench bench/bench_async_throughput.py [--steps 3]

On a GPU cluster async's gain is generation overlapping training on other GPUs; here generation and
training share the same CPU cores, so the ratio is what remains of it on one machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# (label, loop, CLIPO on)
CASES = (
    ("sync, CLIPO off", "sync", False),
    ("sync, CLIPO on", "sync", True),
    ("async, CLIPO off", "async", False),
    ("async, CLIPO on", "async", True),
    ("TransferQueue, CLIPO off", "tq", False),
    ("TransferQueue, CLIPO on", "tq", True),
)
AGE = 1  # max_trajectory_age_steps of the async runs


def step_rows(
    metrics: list[tuple[int, str, dict]], ends: dict[int, float] | None = None
) -> dict[int, dict[str, float]]:
    """Per step: NeMo-RL's E2E tokens/s, its step time and the tokens it counted; with `ends`
    (the wall clock when each step's last log came), the wall time since the previous step's end
    and tokens over it (`wall_s`, `wall_tok_s`; from step 2)."""
    rows: dict[int, dict[str, float]] = {}
    keys = {
        ("performance", "tokens_per_sec"): "tok_s",
        ("timing/train", "total_step_time"): "step_s",
        ("train", "total_num_tokens"): "tokens",
    }
    for step, prefix, m in metrics:
        for (p, k), name in keys.items():
            if prefix == p and k in m:
                rows.setdefault(step, {})[name] = float(m[k])
    for step, row in rows.items():
        if ends and step - 1 in ends and step in ends:
            row["wall_s"] = ends[step] - ends[step - 1]
            row["wall_tok_s"] = row["tokens"] / row["wall_s"]
    return rows


def _col(r: dict, key: str, fmt: str) -> str:
    return " / ".join(
        format(r["steps"][s][key], fmt) if key in r["steps"][s] else "-" for s in sorted(r["steps"])
    )


def _mean(r: dict, key: str, skip: int) -> float:
    kept = [s for s in sorted(r["steps"]) if s > skip and key in r["steps"][s]]
    return statistics.mean(r["steps"][s][key] for s in kept) if kept else float("nan")


def table(results: dict[str, dict], skip: int = 1) -> list[str]:
    """The markdown tables: per case, per step, NeMo-RL's tokens/s and step time and the wall
    clock between step ends; the means over the steps after the first `skip` (start-up:
    compilation, the first rollouts); then the ratios of those means."""
    lines = [
        "| run | tokens per step | NeMo-RL tokens/s per step | NeMo-RL step s per step "
        "| wall s per step | mean NeMo-RL tokens/s | mean wall tokens/s | mean wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    means = {}
    for label, r in results.items():
        means[label] = {k: _mean(r, k, skip) for k in ("tok_s", "wall_tok_s", "wall_s")}
        m = means[label]
        lines.append(
            f"| {label} | {_col(r, 'tokens', '.0f')} | {_col(r, 'tok_s', '.1f')} "
            f"| {_col(r, 'step_s', '.1f')} | {_col(r, 'wall_s', '.1f')} "
            f"| {m['tok_s']:.1f} | {m['wall_tok_s']:.1f} | {m['wall_s']:.1f} |"
        )
    lines += [
        "",
        "| ratio of means | NeMo-RL tokens/s | wall tokens/s | wall s per step |",
        "|---|---|---|---|",
    ]
    pairs = (
        ("async / sync, CLIPO off", "async, CLIPO off", "sync, CLIPO off"),
        ("async / sync, CLIPO on", "async, CLIPO on", "sync, CLIPO on"),
        ("CLIPO on / off, sync", "sync, CLIPO on", "sync, CLIPO off"),
        ("CLIPO on / off, async", "async, CLIPO on", "async, CLIPO off"),
        ("TransferQueue / sync, CLIPO off", "TransferQueue, CLIPO off", "sync, CLIPO off"),
        ("TransferQueue / sync, CLIPO on", "TransferQueue, CLIPO on", "sync, CLIPO on"),
        ("CLIPO on / off, TransferQueue", "TransferQueue, CLIPO on", "TransferQueue, CLIPO off"),
    )
    for name, a, b in pairs:
        if a in means and b in means:
            cells = " | ".join(
                f"{means[a][k] / means[b][k]:.3f}" for k in ("tok_s", "wall_tok_s", "wall_s")
            )
            lines.append(f"| {name} | {cells} |")
    return lines


def run_case(loop: str, clipo_on: bool, *, model: Path, out: Path, steps: int, worker_fqn: str):
    from clipo_testkit.nemo_rl.cpu_session import make_async, make_tq
    from clipo_testkit.nemo_rl.nemo_rl_loop import contract_config, run_grpo

    cfg = contract_config(
        "grpo", clipo_on, model_dir=model, out_dir=out, max_steps=steps, warmup_steps=0
    )
    cfg["checkpointing"]["enabled"] = False  # no checkpoint writes in the timed steps
    cfg["loss_fn"]["use_importance_sampling_correction"] = True  # the same recipe in all four
    if loop == "async":
        make_async(cfg, AGE)
    elif loop == "tq":
        make_tq(cfg)
    from nemo_rl.utils.logger import Logger

    ends: dict[int, float] = {}  # wall clock at each step's last log (timing/train, step_finished)
    orig = Logger.log_metrics

    def log_metrics(self, metrics, step, prefix="", *a, **kw):
        if prefix == "timing/train":
            ends[step] = time.perf_counter()
        return orig(self, metrics, step, prefix, *a, **kw)

    Logger.log_metrics = log_metrics
    try:
        result = run_grpo(cfg, worker_fqn=worker_fqn)
    finally:
        Logger.log_metrics = orig
    return {"steps": step_rows(result["metrics"], ends)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cases", default="all", help="comma-separated labels, or all")
    args = ap.parse_args()
    from clipo_testkit.nemo_rl.cpu_session import (
        contract_model_dir,
        ray_session,
        requirements,
        tq_requirements,
    )

    cases = [c for c in CASES if args.cases == "all" or c[0] in args.cases.split(",")]
    tq = any(loop == "tq" for _, loop, _ in cases)
    missing = requirements() or (tq_requirements() if tq else None)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    results = {}
    with tempfile.TemporaryDirectory(prefix="clipo_bench_async_") as tmp:
        with ray_session(
            Path(tmp) / "megatron_ckpt", async_actors=True, tq_actors=tq
        ) as worker_fqn:
            model = contract_model_dir()
            for i, (label, loop, clipo_on) in enumerate(cases):
                results[label] = run_case(
                    loop,
                    clipo_on,
                    model=model,
                    out=Path(tmp) / str(i),
                    steps=args.steps,
                    worker_fqn=worker_fqn,
                )
                print(f"[bench] {label}: {results[label]}", flush=True)
    print(
        f"\nNeMo-RL loops on CPU (contract harness, GRPO recipe, 2 prompts x 8 generations, "
        f"{args.steps} steps, async max_trajectory_age_steps {AGE}); tokens/s = NeMo-RL's "
        "performance/tokens_per_sec (prompt + generated tokens of the rows trained / "
        "total_step_time)\n"
    )
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
