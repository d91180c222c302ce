# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
# shellcheck shell=bash
# Shared body of the CLIPO sbatch scripts (sourced by track*.sh): a Ray cluster over the job's nodes
# (head on node 0, `ray start --block` workers on the others, the pattern of NeMo-RL's ray.sub), then
# the CLIPO driver on the head node. Needs no NeMo-RL checkout at submit time: NeMo-RL lives in the
# container (CONTAINER) or in a venv (VENV); this project is found at CLIPO_ROOT.
#
# Environment (defaults in brackets):
#   RECIPE            recipe YAML, relative to CLIPO_ROOT or absolute        [set by the track script]
#   OVERRIDES         extra dotted overrides, space separated                 []
#   CONTAINER         enroot/pyxis image with NeMo-RL (uses srun --container-image) []
#   MOUNTS            extra container mounts, comma separated                 []
#   VENV              venv with NeMo-RL + clipo_megatron (used without CONTAINER) []
#   NEMO_RL_ROOT      NeMo-RL checkout inside the container / venv host       [/opt/nemo-rl]
#   CLIPO_DATA_DIR    parquet data root (train/, test/)                       [$CLIPO_ROOT/data/clipo]
#   GPUS_PER_NODE     GPUs per node                                           [8]
#   RAY_PORT          Ray GCS port                                            [6379]
#   BASE_LOG_DIR      logs go to $BASE_LOG_DIR/<jobid>-logs                   [$CLIPO_ROOT/slurm-logs]
#   HF_HOME           Hugging Face cache (shared filesystem)                  [inherited]
#   RAY_HEAD_WAIT_S   seconds to let the Ray head start before workers join  [10]
#   DRY_RUN=1         print the srun / ray / driver commands, run nothing (works off-cluster)

set -euo pipefail

: "${RECIPE:?RECIPE must name a recipe YAML}"
OVERRIDES="${OVERRIDES:-}"
CONTAINER="${CONTAINER:-}"
MOUNTS="${MOUNTS:-}"
VENV="${VENV:-}"
NEMO_RL_ROOT="${NEMO_RL_ROOT:-/opt/nemo-rl}"
CLIPO_DATA_DIR="${CLIPO_DATA_DIR:-$CLIPO_ROOT/data/clipo}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
RAY_PORT="${RAY_PORT:-6379}"
BASE_LOG_DIR="${BASE_LOG_DIR:-$CLIPO_ROOT/slurm-logs}"
DRY_RUN="${DRY_RUN:-0}"

if [[ "$DRY_RUN" == "1" ]]; then
  SLURM_JOB_ID="${SLURM_JOB_ID:-dryrun}"
  SLURM_JOB_NUM_NODES="${SLURM_JOB_NUM_NODES:-${DRY_RUN_NODES:-2}}"
  NODES=()
  for ((i = 0; i < SLURM_JOB_NUM_NODES; i++)); do NODES+=("node$i"); done
else
  : "${SLURM_JOB_ID:?not inside a Slurm job: submit with sbatch, or set DRY_RUN=1 to print the commands}"
  mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
fi
NUM_NODES=${#NODES[@]}
HEAD_NODE="${NODES[0]}"
LOG_DIR="$BASE_LOG_DIR/${SLURM_JOB_ID}-logs"

if [[ "$RECIPE" != /* ]]; then RECIPE="$CLIPO_ROOT/$RECIPE"; fi

run() {  # run or (DRY_RUN) print a command line
  if [[ "$DRY_RUN" == "1" ]]; then
    printf '+ %s\n' "$*"
  else
    eval "$@"
  fi
}

if [[ -n "$CONTAINER" ]]; then
  CONTAINER_MOUNTS="$CLIPO_ROOT:$CLIPO_ROOT,$LOG_DIR:$LOG_DIR"
  if [[ "$CLIPO_DATA_DIR" != "$CLIPO_ROOT"/* ]]; then CONTAINER_MOUNTS="$CONTAINER_MOUNTS,$CLIPO_DATA_DIR:$CLIPO_DATA_DIR"; fi
  CONTAINER_MOUNTS="$CONTAINER_MOUNTS${MOUNTS:+,$MOUNTS}"
  SRUN_CONTAINER="--container-image=$CONTAINER --container-mounts=$CONTAINER_MOUNTS --no-container-mount-home"
  ACTIVATE="true"
elif [[ -n "$VENV" ]]; then
  SRUN_CONTAINER=""
  ACTIVATE="source $VENV/bin/activate"
else
  echo "set CONTAINER (NeMo-RL image) or VENV (a venv with NeMo-RL and clipo_megatron)" >&2
  exit 2
fi

ENV_EXPORTS="export NEMO_RL_ROOT=$NEMO_RL_ROOT CLIPO_DATA_DIR=$CLIPO_DATA_DIR PYTHONPATH=$CLIPO_ROOT:$NEMO_RL_ROOT:\${PYTHONPATH:-} RAY_DEDUP_LOGS=0"
if [[ -n "${HF_HOME:-}" ]]; then ENV_EXPORTS="$ENV_EXPORTS HF_HOME=$HF_HOME"; fi
PREAMBLE="$ACTIVATE && $ENV_EXPORTS && cd $CLIPO_ROOT"
SRUN="srun --overlap --nodes=1 --ntasks=1 $SRUN_CONTAINER"

run mkdir -p "$LOG_DIR"
echo "[clipo] job $SLURM_JOB_ID: $NUM_NODES nodes x $GPUS_PER_NODE GPUs, head $HEAD_NODE, recipe $RECIPE, logs $LOG_DIR"

# 0. validate the recipe before spending GPU time
DRIVER_ARGS="--config $RECIPE cluster.num_nodes=$NUM_NODES cluster.gpus_per_node=$GPUS_PER_NODE $OVERRIDES"
run "$SRUN -w $HEAD_NODE bash -c '$PREAMBLE && python examples/run_grpo_clipo.py --validate-only $DRIVER_ARGS > $LOG_DIR/config.json'"

# 1. Ray head on node 0, workers on the others (each blocks for the job's lifetime)
HEAD_IP_CMD="\$(hostname --ip-address | cut -d\" \" -f1)"
run "$SRUN -w $HEAD_NODE bash -c '$PREAMBLE && ray start --head --node-ip-address=$HEAD_IP_CMD --port=$RAY_PORT --num-gpus=$GPUS_PER_NODE --block' > $LOG_DIR/ray-head.log 2>&1 &"
if [[ "$DRY_RUN" == "1" ]]; then HEAD_ADDR="$HEAD_NODE:$RAY_PORT"; else
  sleep "${RAY_HEAD_WAIT_S:-10}"
  HEAD_ADDR="$(srun --overlap --nodes=1 --ntasks=1 -w "$HEAD_NODE" hostname --ip-address | cut -d" " -f1):$RAY_PORT"
fi
for ((i = 1; i < NUM_NODES; i++)); do
  run "$SRUN -w ${NODES[$i]} bash -c '$PREAMBLE && ray start --address=$HEAD_ADDR --num-gpus=$GPUS_PER_NODE --block' > $LOG_DIR/ray-worker-$i.log 2>&1 &"
done

# 2. wait until every node has joined
WAIT_CMD="python -m clipo_megatron.nemo_rl.ray_wait --nodes $NUM_NODES --timeout 600"
run "$SRUN -w $HEAD_NODE bash -c '$PREAMBLE && $WAIT_CMD'"

# 3. the driver on the head node
run "$SRUN -w $HEAD_NODE bash -c '$PREAMBLE && RAY_ADDRESS=$HEAD_ADDR python examples/run_grpo_clipo.py $DRIVER_ARGS' 2>&1 | tee $LOG_DIR/driver.log"
