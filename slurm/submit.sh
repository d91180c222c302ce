#!/bin/bash
# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
# Submit any NeMo-RL GRPO recipe (CLIPO's own, or an overlay over one of NeMo-RL's) with the nodes
# and GPUs per node it asks for: cluster.num_nodes and cluster.gpus_per_node through its `defaults:`
# chain and the overrides (clipo_megatron.nemo_rl.guard.recipe_cluster, run here with CLIPO_PYTHON,
# a Python with omegaconf), passed to sbatch as --nodes / --gpus-per-node.
#
#   CONTAINER=/path/nemo-rl.sqsh slurm/submit.sh my.yaml [key=value ...]   # sbatch ... slurm/run_recipe.sh
#   DRY_RUN=1 CONTAINER=img slurm/submit.sh my.yaml            # print the sbatch line and the job's srun lines
#   RAY_SUB=/path/to/RL/ray.sub CONTAINER=img slurm/submit.sh my.yaml    # through NeMo-RL's own ray.sub
#
#   SBATCH_ARGS   more sbatch options, split on whitespace ("--account=ACC --partition=PART --time=4:00:00")
#   RAY_SUB       NeMo-RL's ray.sub: COMMAND runs examples/run_grpo_clipo.py with the recipe on the
#                 Ray head, MOUNTS holds the checkout, BASE_LOG_DIR [$CLIPO_ROOT/slurm-logs], the recipe's
#                 files outside them,
#                 NEMO_RL_ROOT, CLIPO_DATA_DIR (when the recipe reads it), HF_HOME, CHECKPOINT_DIR
#   NEMO_RL_ROOT  a NeMo-RL checkout on this host, for `nemo_rl:` parents (mounted, exported)
# The recipe path is taken relative to the current directory; every other variable is
# slurm/common.sh's (the job inherits this environment). docs/slurm.md, "Submit your recipe".

set -euo pipefail
CLIPO_ROOT="${CLIPO_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export CLIPO_ROOT
if (($# < 1)) || [[ "$1" == -* ]]; then
  echo "usage: slurm/submit.sh RECIPE.yaml [key=value ...] (DRY_RUN=1 prints, RAY_SUB=<ray.sub> uses NeMo-RL's)" >&2
  exit 2
fi
RECIPE="$(realpath -ms -- "$1")"
shift
export RECIPE
read -r -d '' -a OVERRIDE_ARGS <<< "${OVERRIDES:-}" || true # as common.sh splits them
OVERRIDE_ARGS+=("$@")
read -r -d '' -a SBATCH_OPTS <<< "${SBATCH_ARGS:-}" || true
DRY_RUN="${DRY_RUN:-0}"
CONTAINER="${CONTAINER:-}"
MOUNTS="${MOUNTS:-}"
USER_NEMO_RL_ROOT="${NEMO_RL_ROOT:-}"
if [[ -d "$USER_NEMO_RL_ROOT" ]]; then USER_NEMO_RL_ROOT="$(realpath -ms -- "$USER_NEMO_RL_ROOT")"; fi
# shellcheck source-path=SCRIPTDIR source=recipe.sh
source "$CLIPO_ROOT/slurm/recipe.sh"
# shellcheck disable=SC2119 # no allocation yet: nothing to hold the recipe to
read_recipe
NAME="clipo-$(basename "$RECIPE" .yaml)"
SIZE=(--nodes="$RECIPE_NODES" --gpus-per-node="$RECIPE_GPUS_PER_NODE")
show() { # NAME=value... -- a command line to paste back, each word quoted only where needed
  local out="+" a v env=1 sq="'"
  for a in "$@"; do
    v="${a#*=}"
    if [[ "$a" == -- ]]; then env=0; elif [[ "$a" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then out+=" $a"
    elif ((env)); then out+=" ${a%%=*}='${v//$sq/$sq\\$sq$sq}'"; else out+=" ${a@Q}"; fi
  done
  printf '%s\n' "$out"
}

if [[ -z "${RAY_SUB:-}" ]]; then # ours: slurm/run_recipe.sh (common.sh) in an allocation of that size
  SBATCH=(sbatch "${SIZE[@]}" --job-name="$NAME" ${SBATCH_OPTS[@]+"${SBATCH_OPTS[@]}"}
    "$CLIPO_ROOT/slurm/run_recipe.sh" "$@")
  if [[ "$DRY_RUN" != "1" ]]; then
    resolve_data_dir # a recipe that reads CLIPO_DATA_DIR without it stops here, not in the queue
    exec "${SBATCH[@]}"
  fi
  echo "[clipo] $RECIPE: $RECIPE_NODES nodes x $RECIPE_GPUS_PER_NODE GPUs, from $RECIPE_NODES_FROM"
  show -- "${SBATCH[@]}"
  echo "[clipo] the job, as it would run in that allocation:"
  SLURM_JOB_NUM_NODES="$RECIPE_NODES" exec bash "$CLIPO_ROOT/slurm/run_recipe.sh" "$@"
fi

# NeMo-RL's ray.sub: it brings up Ray in CONTAINER with MOUNTS and runs COMMAND on the head
# (written to <log dir>/driver_command.sh, run with bash in --container-workdir=$SLURM_SUBMIT_DIR).
if [[ ! -f "$RAY_SUB" || -z "$CONTAINER" ]]; then
  echo "[clipo] RAY_SUB=$RAY_SUB: needs NeMo-RL's ray.sub (a file) and CONTAINER (its image); ray.sub runs containers only" >&2
  exit 2
fi
resolve_data_dir
if [[ -n "${CHECKPOINT_DIR:-}" ]]; then
  CHECKPOINT_DIR="$(abspath "$CHECKPOINT_DIR")"
  OVERRIDE_ARGS+=("checkpointing.checkpoint_dir=$CHECKPOINT_DIR")
fi
# ray.sub's log dirs go under BASE_LOG_DIR (its default, the submit directory, would litter the
# checkout), which its head reads inside the container (.shared_fs_canary, driver_command.sh): mounted
BASE_LOG_DIR="$(abspath "${BASE_LOG_DIR:-$CLIPO_ROOT/slurm-logs}")"
add_mount "$CLIPO_ROOT" "$BASE_LOG_DIR" "$CLIPO_DATA_DIR" "${HF_HOME:-}" "${CHECKPOINT_DIR:-}"
add_recipe_mounts
ENV_SET=()
for var in USER_NEMO_RL_ROOT CLIPO_DATA_DIR HF_HOME; do
  if [[ -n "${!var:-}" ]]; then ENV_SET+=("${var#USER_}=${!var}"); fi
done
DRIVER=(python examples/run_grpo_clipo.py --config "$RECIPE" ${OVERRIDE_ARGS[@]+"${OVERRIDE_ARGS[@]}"})
PYPATH="$(printf %q "$CLIPO_ROOT${USER_NEMO_RL_ROOT:+:$USER_NEMO_RL_ROOT}")\${PYTHONPATH:+:\$PYTHONPATH}"
COMMAND="cd $(printf %q "$CLIPO_ROOT") && export PYTHONPATH=$PYPATH$(printf ' %q' ${ENV_SET[@]+"${ENV_SET[@]}"}) && $(printf '%q ' "${DRIVER[@]}")"
SBATCH_ENV=(COMMAND="${COMMAND% }" CONTAINER="$CONTAINER" MOUNTS="$(mounts_csv)"
  GPUS_PER_NODE="$RECIPE_GPUS_PER_NODE" BASE_LOG_DIR="$BASE_LOG_DIR")
SBATCH=(sbatch "${SIZE[@]}" --job-name="$NAME"
  ${SBATCH_OPTS[@]+"${SBATCH_OPTS[@]}"} "$(realpath -- "$RAY_SUB")")
cd "$CLIPO_ROOT" # ray.sub's --container-workdir is the submit directory
if [[ "$DRY_RUN" != "1" ]]; then exec env "${SBATCH_ENV[@]}" "${SBATCH[@]}"; fi
describe_recipe "ray.sub sizes Ray from SLURM_JOB_NUM_NODES = --nodes"
echo "[clipo] ray.sub's COMMAND runs the driver on the Ray head, after every node joined:"
show "${SBATCH_ENV[@]}" -- "${SBATCH[@]}"
