# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The paper's experiments: its printed tables, a recipe for each row, a job array per table.

`scores` reads `examples/configs/reproduce/paper_scores.json` (every printed number of every
experiment table, with each row's settings), `recipes` turns a row's settings into its
reproduction recipe, `layout` lists a table's runs as the tasks of a Slurm job array. Standard
library only: `slurm/paper_table.sh` runs `python3 -m clipo_megatron.paper` on a login node.
"""
