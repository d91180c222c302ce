# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Megatron-Core pieces of CLIPO (imports megatron.core; never the runner or NeMo-RL).

- `cpu_spec.get_cpu_gpt_layer_spec()` and `cpu_shims.enable_cpu_shims()`: run a
  real GPTModel on CPU (tests, the single-machine run). GPU paths are untouched.
- `model_builder.transformer_config`, `build_gpt_model`: Llama-family GPTModel
  from a `models.arch.GPTArch` (plain data, below Megatron).
- `head.ContrastiveHead` (+ `get_contrastive_head_spec`, `build_contrastive_head`,
  `attach_head`): the projection D -> d, replicated or TP column-parallel.
- `microbatch_pooler.MicrobatchPooler`: the one capture path of every driver: a
  tee of the logprob pass's microbatch iterator and a forward hook on the final
  norm pool the response hidden states inside that forward (no second pass).
- `parallel_pooling`: SP / CP / packed-THD partial sums + all-reduce.
- `gather`: grad-carrying DP gather, head-grad all-reduce, PP broadcast.
- `head_trainer.HeadTrainer`: AdamW, warm-up, fixed head, the CLIPO step,
  state_dict (the process-global RNG is the driver's, not saved here).
- `clipo_step.clipo_step(trainer, pooled, correct, group_ids, sample_ids, step=,
  pp_group=)`: the one CLIPO step every driver calls (head step on the last
  stage, device-clean; rewards broadcast to the other stages when asked).
- `parallel`: the one place that reads megatron's parallel_state: bootstrap
  (`ensure_model_parallel`), `ParallelGroups.from_parallel_state()`, stage facts
  (`is_pipeline_last_stage`, `tensor_parallel_rank`, ...).
"""
