# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A run's written records and the reports made from them: the per-step metrics log,
results.json / results.md, the plots, and `clipo-megatron compare`'s tables and verdicts.
It imports nothing of the trainer: the runner fills in a `RunHeader` and calls down."""
