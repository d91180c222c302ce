# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Evaluation of policies on the paper's benchmark suites (`clipo-megatron eval`).

`suites` (Track I / II and their averages), `generator` (the generation
protocol and backends), `engine` (resumable generate-grade-record loop),
`store` (per-sample jsonl), `aggregate` (pass@1, averages, deltas), `report`
(markdown, bar chart), `run` (the command), `compare_runs` (`eval compare`),
`heldout` (a training run's own held-out task).
"""
