#!/bin/bash
# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
# CLIPO GRPO, Track I: Qwen2.5-3B-Instruct on GSM8K (batch 512 x 16, 2048 response tokens, d=512).
# Runs the RECOMMENDED recipe by default (examples/configs/track1_qwen3b.yaml: grader math_verify, 6 epochs,
# 14 head-only warm-up steps, no eps; docs/reproduce.md), not the reproduction of the paper's numbers.
# The reproduction is one variable away: RECIPE=examples/configs/reproduce/track1_grpo_clipo.yaml (the
# authors' run: grader paper, 6 epochs, 13 head-only steps, eps 1e-8, verl's KL gradient); every
# run of a paper table as job arrays: bash slurm/paper_table.sh table1 (docs/reproduce.md).
# A preset of slurm/run_recipe.sh: this recipe and its 1 node, then the generic script (docs/slurm.md,
# "Submit your recipe"); any recipe, its own node count: slurm/submit.sh RECIPE.
#
#   CONTAINER=/path/nemo-rl.sqsh sbatch --account=ACC --partition=PART slurm/track1_qwen3b.sh
#   VENV=/path/venv sbatch slurm/track1_qwen3b.sh                        # NeMo-RL + clipo_megatron installed
#   DRY_RUN=1 CONTAINER=img bash slurm/track1_qwen3b.sh                  # print the commands, run nothing
#   OVERRIDES="grpo.max_num_steps=100 clipo.method.temperature=0.02" sbatch slurm/track1_qwen3b.sh
#   sbatch slurm/track1_qwen3b.sh grpo.max_num_steps=100 'key=a value'        # overrides as arguments, verbatim
#   RECIPE=examples/configs/track1_qwen3b_dapo.yaml sbatch slurm/track1_qwen3b.sh   # another objective
#
#   HF_HOME=/shared/hf CHECKPOINT_DIR=/shared/ckpt/run1 CONTAINER=... sbatch ...  # both get mounted
#
# Submit from the clipo_megatron checkout (or set CLIPO_ROOT); no NeMo-RL checkout is needed. The
# recipe is read on this host first (its cluster.num_nodes must equal this allocation, else one line
# and exit 2; a Python with omegaconf: CLIPO_PYTHON), then validated in the job (it stops there, with
# the reason, if it does not); then a Ray cluster as NeMo-RL's ray.sub builds it, with the driver
# inside the head's container. Time limit: the driver saves and stops SAVE_MARGIN_S (900 s) before
# it and the job requeues itself; preemption requeues it (--requeue) from the last checkpoint.
# See slurm/common.sh for every variable and docs/slurm.md for the mapping to ray.sub.
#SBATCH --job-name=clipo-track1_qwen3b
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --output=slurm-%j-clipo-track1_qwen3b.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR1@180

set -euo pipefail
# the preset: this recipe, then the generic script (CLIPO_ROOT found as run_recipe.sh finds it)
RECIPE="${RECIPE:-examples/configs/track1_qwen3b.yaml}"
export RECIPE
for root in "${CLIPO_ROOT:-}" "${SLURM_SUBMIT_DIR:-}" "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; do
  if [[ -n "$root" && -f "$root/slurm/run_recipe.sh" ]]; then
    export CLIPO_ROOT="$root"
    exec bash "$root/slurm/run_recipe.sh" "$@"
  fi
  if [[ -n "${CLIPO_ROOT:-}" ]]; then break; fi # a CLIPO_ROOT given is the only place looked at
done
echo "cannot find the clipo_megatron checkout: submit from it or set CLIPO_ROOT=/path/to/clipo_megatron" >&2
exit 2
