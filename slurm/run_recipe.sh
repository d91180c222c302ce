#!/bin/bash
# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
# Run any NeMo-RL GRPO recipe with the CLIPO driver (examples/run_grpo_clipo.py): CLIPO's own
# (examples/configs/*.yaml) or an overlay over one of NeMo-RL's (`defaults:` nemo_rl:... plus
# clipo_megatron:clipo.yaml). Submit it with slurm/submit.sh, which asks sbatch for the recipe's
# nodes and GPUs per node; an allocation of another size stops here in one line.
#
#   CONTAINER=/path/nemo-rl.sqsh slurm/submit.sh my.yaml [key=value ...]   # sbatch --nodes=<recipe's> ... this script
#   DRY_RUN=1 CONTAINER=img RECIPE=my.yaml bash slurm/run_recipe.sh         # print the job's commands, run nothing
#
# Environment: slurm/common.sh lists every variable; docs/slurm.md, "Submit your recipe".
#SBATCH --job-name=clipo-recipe
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --output=slurm-%j-clipo.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR1@180

set -euo pipefail
if [[ -z "${CLIPO_ROOT:-}" ]]; then # sbatch runs a copy of this file: find the checkout
  for cand in "${SLURM_SUBMIT_DIR:-}" "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; do
    if [[ -n "$cand" && -f "$cand/slurm/common.sh" ]]; then CLIPO_ROOT="$cand"; break; fi
  done
fi
if [[ -z "${CLIPO_ROOT:-}" || ! -f "$CLIPO_ROOT/slurm/common.sh" ]]; then
  echo "cannot find the clipo_megatron checkout: submit from it or set CLIPO_ROOT=/path/to/clipo_megatron" >&2
  exit 2
fi
export CLIPO_ROOT
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$CLIPO_ROOT/slurm/common.sh"
