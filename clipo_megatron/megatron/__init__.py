# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""CLIPO inside Megatron-Core (imports megatron.core; never the runner or NeMo-RL).

Both drivers (the single-machine runner, NeMo-RL's Megatron worker) use these pieces; the
runner's own model plumbing (a GPTModel on CPU, its builder and passes) is `runner/model/`.

- `head.ContrastiveHead` (+ `get_contrastive_head_spec`, `build_contrastive_head`,
  `attach_head`): the projection D -> d, replicated or TP column-parallel.
- `pooling/`: the response mean in one room. `pooling.microbatch_pooler.MicrobatchPooler` is
  the one capture path of every driver: a tee of the logprob pass's microbatch iterator and a
  forward hook on the final norm pool the response hidden states inside that forward (no
  second pass); `pooling.sharded` does SP / CP / packed-THD partial sums + all-reduce over
  `pooling.masked_mean`'s pure-torch sums; `pooling.positions` says which positions pool.
- `gather`: grad-carrying DP gather, head-grad all-reduce, PP broadcast.
- `head_trainer.HeadTrainer`: AdamW, warm-up, fixed head, the CLIPO step,
  state_dict (the process-global RNG is the driver's, not saved here).
- `head_checkpoint`: the head's one on-disk format.
- `clipo_step.clipo_step(trainer, pooled, correct, group_ids, sample_ids, step=,
  pp_group=)`: the one CLIPO step every driver calls (head step on the last
  stage, device-clean; rewards broadcast to the other stages when asked).
- `parallel`: the one place that reads megatron's parallel_state: bootstrap
  (`ensure_model_parallel`), `ParallelGroups.from_parallel_state()`, stage facts
  (`is_pipeline_last_stage`, `tensor_parallel_rank`, ...).
"""
