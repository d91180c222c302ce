# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""bench/bench_async_throughput.py's table on hand-made metrics: the values it reads from
NeMo-RL's logs, the means past step 1 and the four ratios (the bench itself runs NeMo-RL's loops
for minutes; its numbers are in docs/validation.md)."""

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


def test_step_rows_reads_nemo_rl_metrics_and_the_wall_clock():
    rows = _bench().step_rows(_log([10.0, 20.0], [4.0, 2.0]), {1: 100.0, 2: 110.0})
    assert rows == {
        1: {"tokens": 40.0, "tok_s": 10.0, "step_s": 4.0},  # no previous end: no wall time
        2: {"tokens": 40.0, "tok_s": 20.0, "step_s": 2.0, "wall_s": 10.0, "wall_tok_s": 4.0},
    }


def test_table_means_past_step_one_and_ratios():
    b = _bench()
    logs = {  # steps 2 and 3 count: NeMo-RL's means 20 / 30 / 40 / 60 tokens/s
        "sync, CLIPO off": ([5.0, 10.0, 30.0], [8.0, 4.0, 2.0]),
        "sync, CLIPO on": ([5.0, 20.0, 40.0], [8.0, 4.0, 2.0]),
        "async, CLIPO off": ([1.0, 40.0, 40.0], [9.0, 1.0, 3.0]),
        "async, CLIPO on": ([1.0, 60.0, 60.0], [9.0, 2.0, 2.0]),
    }
    ends = {  # wall s of steps 2 and 3: 10, 10 | 10, 10 | 5, 5 | 4, 8
        "sync, CLIPO off": {1: 50.0, 2: 60.0, 3: 70.0},
        "sync, CLIPO on": {1: 50.0, 2: 60.0, 3: 70.0},
        "async, CLIPO off": {1: 50.0, 2: 55.0, 3: 60.0},
        "async, CLIPO on": {1: 50.0, 2: 54.0, 3: 62.0},
    }
    results = {k: {"steps": b.step_rows(_log(*v), ends[k])} for k, v in logs.items()}
    lines = b.table(results)
    # tokens = tokens/s x step s: 40 / 40 / 60 tokens; wall tokens/s 4 and 6, mean 5
    assert lines[2] == (
        "| sync, CLIPO off | 40 / 40 / 60 | 5.0 / 10.0 / 30.0 | 8.0 / 4.0 / 2.0 | - / 10.0 / 10.0 "
        "| 20.0 | 5.0 | 10.0 |"
    )
    # 9 / 120 / 120 tokens; wall tokens/s 120 / 4 = 30 and 120 / 8 = 15, mean 22.5; wall s 6
    assert lines[5] == (
        "| async, CLIPO on | 9 / 120 / 120 | 1.0 / 60.0 / 60.0 | 9.0 / 2.0 / 2.0 | - / 4.0 / 8.0 "
        "| 60.0 | 22.5 | 6.0 |"
    )
    ratios = {ln.split(" | ")[0][2:]: ln[:-2].split(" | ")[1:] for ln in lines[9:]}
    assert ratios == {  # NeMo-RL tokens/s, wall tokens/s, wall s; wall tokens/s means:
        # sync off (40/10 + 60/10)/2 = 5, sync on (80/10 + 80/10)/2 = 8,
        # async off (40/5 + 120/5)/2 = 16, async on 22.5
        "async / sync, CLIPO off": ["2.000", "3.200", "0.500"],  # 40/20; 16/5; 5/10
        "async / sync, CLIPO on": ["2.000", "2.812", "0.600"],  # 60/30; 22.5/8; 6/10
        "CLIPO on / off, sync": ["1.500", "1.600", "1.000"],  # 30/20; 8/5; 10/10
        "CLIPO on / off, async": ["1.500", "1.406", "1.200"],  # 60/40; 22.5/16; 6/5
    }
