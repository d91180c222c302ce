#!/bin/bash
# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
# Every run of one of the paper's tables, as Slurm job arrays: one printed row a task, each task
# the row's reproduction recipe (examples/configs/reproduce/, generated from paper_scores.json;
# docs/reproduce.md), run exactly as a single job of slurm/track*.sh runs it (slurm/common.sh: the
# preflight first, the Ray cluster, the same logs/<jobid>-logs and the recipe's checkpoint dir).
# One array per track: a Track I task takes 1 node, a Track II task 2. The base model's rows are
# not runs: the command that scores them is printed instead.
#
#   CONTAINER=/path/nemo-rl.sqsh bash slurm/paper_table.sh table1          # submits; run with bash
#   CONTAINER=img DRY_RUN=1 bash slurm/paper_table.sh table3     # the sbatch lines and every task
#   CONTAINER=img DRY_RUN=1 SLURM_ARRAY_TASK_ID=2 bash slurm/paper_table.sh table3  # one task's srun lines
#   SEEDS="1 2 3" CONTAINER=... bash slurm/paper_table.sh table2   # each row 3 times: grpo.seed 1, 2, 3
#   SBATCH_ARGS="--account=ACC --partition=PART" CONTAINER=... bash slurm/paper_table.sh group_size
#   bash slurm/paper_table.sh table1 grpo.max_num_steps=100      # overrides for every task, verbatim
#   python3 -m clipo_megatron.paper tables                       # the table keys (PYTHONPATH=.)
#
# A row that several tables print runs the same recipe: a second table's task finds the first's
# checkpoints in the recipe's checkpoint dir and resumes from them. Score each finished run with
# `clipo-megatron eval` and set it beside the paper's row with `clipo-megatron eval paper`
# (docs/reproduce.md). Variables: slurm/common.sh; PYTHON [python3] reads the table on the login node.
#SBATCH --job-name=clipo-paper
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --output=slurm-%A_%a-clipo-paper.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR1@180

set -euo pipefail
if [[ -z "${CLIPO_ROOT:-}" ]]; then
  for cand in "${SLURM_SUBMIT_DIR:-}" "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; do
    if [[ -n "$cand" && -f "$cand/slurm/common.sh" ]]; then CLIPO_ROOT="$cand"; break; fi
  done
fi
if [[ -z "${CLIPO_ROOT:-}" || ! -f "$CLIPO_ROOT/slurm/common.sh" ]]; then
  echo "cannot find the clipo_megatron checkout: submit from it or set CLIPO_ROOT=/path/to/clipo_megatron" >&2
  exit 2
fi
export CLIPO_ROOT
TABLE="${1:-}"
if [[ -z "$TABLE" || "$TABLE" == -* ]]; then
  echo "usage: bash slurm/paper_table.sh TABLE [override ...]  (tables: python3 -m clipo_megatron.paper tables)" >&2
  exit 2
fi
shift
TASKS="$(PYTHONPATH="$CLIPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m clipo_megatron.paper \
  array "$TABLE" --seeds "${SEEDS:-}")" || exit 2

if [[ -z "${SLURM_ARRAY_TASK_ID:-}" ]]; then
  if [[ -n "${SLURM_JOB_ID:-}" && "${DRY_RUN:-0}" != "1" ]]; then
    echo "[clipo] run slurm/paper_table.sh with bash, not sbatch: it submits the table's arrays itself" >&2
    exit 2
  fi
  declare -A INDICES=() NODES_OF=()
  while IFS=$'\t' read -r idx track nodes recipe overrides row; do
    if [[ "$idx" == "#"* ]]; then
      echo "[clipo] $TABLE, not a run: ${idx#\# }"
      continue
    fi
    INDICES[$track]+="${INDICES[$track]:+,}$idx"
    NODES_OF[$track]=$nodes
    echo "[clipo] $TABLE task $idx ($track, $nodes node(s)): $row -> $recipe${overrides/#-/}"
  done <<< "$TASKS"
  read -r -a EXTRA <<< "${SBATCH_ARGS:-}"
  for track in $(printf '%s\n' "${!INDICES[@]}" | sort); do
    CMD=(sbatch --array="${INDICES[$track]}" --nodes="${NODES_OF[$track]}" --job-name="clipo-$TABLE-$track"
      ${EXTRA[@]+"${EXTRA[@]}"} "$CLIPO_ROOT/slurm/paper_table.sh" "$TABLE" "$@")
    if [[ "${DRY_RUN:-0}" == "1" ]]; then echo "+ ${CMD[*]}"; else "${CMD[@]}"; fi
  done
  exit 0
fi

# One task of the array: its row's recipe, then the single-job body.
LINE="$(awk -F '\t' -v i="$SLURM_ARRAY_TASK_ID" '$1 == i' <<< "$TASKS")"
if [[ -z "$LINE" ]]; then
  echo "[clipo] $TABLE has no task $SLURM_ARRAY_TASK_ID (python3 -m clipo_megatron.paper array $TABLE)" >&2
  exit 2
fi
IFS=$'\t' read -r _ _ TASK_NODES RECIPE TASK_OVERRIDES ROW <<< "$LINE"
echo "[clipo] $TABLE task $SLURM_ARRAY_TASK_ID: row '$ROW', recipe $RECIPE"
if [[ "$TASK_OVERRIDES" != "-" ]]; then OVERRIDES="${OVERRIDES:+$OVERRIDES }$TASK_OVERRIDES"; fi
export RECIPE OVERRIDES="${OVERRIDES:-}" DRY_RUN_NODES="${DRY_RUN_NODES:-$TASK_NODES}"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$CLIPO_ROOT/slurm/common.sh"
