# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""bench/bench_async_throughput.py's table on hand-made metrics: the values it reads from
NeMo-RL's logs, the means past step 1 and the four ratios (the bench itself runs NeMo-RL's loops
for minutes; its numbers are in docs/nemo_rl.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_async_throughput.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_async_throughput", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _log(tok_s: list[float], step_s: list[float]) -> list[tuple[int, str, dict]]:
    """What run_grpo records of NeMo-RL's log_metrics calls, steps 1..n, plus noise it must skip."""
    out = []
    for i, (t, s) in enumerate(zip(tok_s, step_s, strict=True), start=1):
        out += [
            (i, "train", {"total_num_tokens": t * s, "reward": 0.5}),
            (i, "performance", {"tokens_per_sec": t, "tokens_per_sec_per_gpu": t}),
            (i, "timing/train", {"total_step_time": s, "generation": 1.0}),
            (i, "timing/validation", {"total_step_time": 99.0}),
        ]
    return out


def test_step_rows_reads_nemo_rl_metrics():
    rows = _bench().step_rows(_log([10.0, 20.0], [4.0, 2.0]))
    assert rows == {
        1: {"tokens": 40.0, "tok_s": 10.0, "step_s": 4.0},
        2: {"tokens": 40.0, "tok_s": 20.0, "step_s": 2.0},
    }


def test_table_means_past_step_one_and_ratios():
    b = _bench()
    logs = {  # steps 2 and 3 count: means 20 / 30 / 40 / 60 tokens/s
        "sync, CLIPO off": ([5.0, 10.0, 30.0], [8.0, 4.0, 2.0]),
        "sync, CLIPO on": ([5.0, 20.0, 40.0], [8.0, 4.0, 2.0]),
        "async, CLIPO off": ([1.0, 40.0, 40.0], [9.0, 1.0, 3.0]),
        "async, CLIPO on": ([1.0, 60.0, 60.0], [9.0, 2.0, 2.0]),
    }
    results = {k: {"steps": b.step_rows(_log(*v)), "wall": 100.0} for k, v in logs.items()}
    lines = b.table(results)
    assert (
        lines[2]
        == "| sync, CLIPO off | 5.0 / 10.0 / 30.0 | 8.0 / 4.0 / 2.0 | 40 / 40 / 60 | 20.0 | 3.0 | 100 |"
    )
    assert (
        lines[5]
        == "| async, CLIPO on | 1.0 / 60.0 / 60.0 | 9.0 / 2.0 / 2.0 | 9 / 120 / 120 | 60.0 | 2.0 | 100 |"
    )
    ratios = {ln.split(" | ")[0][2:]: ln.split(" | ")[1:] for ln in lines[9:]}
    assert ratios == {
        "async / sync, CLIPO off": ["2.000", "0.667 |"],  # 40 / 20 tokens/s; 2 / 3 s
        "async / sync, CLIPO on": ["2.000", "0.667 |"],  # 60 / 30; 2 / 3
        "CLIPO on / off, sync": ["1.500", "1.000 |"],  # 30 / 20; 3 / 3
        "CLIPO on / off, async": ["1.500", "1.000 |"],  # 60 / 40; 2 / 2
    }
