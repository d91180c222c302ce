# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Everything checked before a NeMo-RL run, in seconds and before a model or a Ray actor is
built: which NeMo-RL is installed (`compat`), the seams in its source (`seams`), the recipe
loader (`recipes`), the preflight (`preflight`, `preflight_parallel`, `preflight_data`,
`prompt_count`) and what a Slurm job takes from a recipe (`recipe_cluster`, run by slurm/). The integration (`clipo_megatron.nemo_rl`) never imports this room; the entry
points run it first (examples/run_grpo_clipo.py)."""
