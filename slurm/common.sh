# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
# shellcheck shell=bash
# Shared body of the CLIPO sbatch scripts (sourced by run_recipe.sh, which the track*.sh presets run).
# Follows NeMo-RL's ray.sub where it matters (docs/slurm.md maps each step): the job's nodes and GPUs
# per node are the recipe's (cluster.*, read by recipe.sh; an allocation of another size is refused);
# the recipe is validated first (nothing else starts when it fails); the Ray head runs in a step whose
# container is named `ray-head` and that same step, after every node joined, runs the driver
# (ray.sub's COMMAND), so the job's exit status is the driver's; workers wait for the head's signal
# file on the shared log dir, then `ray start --block`; Ray steps claim the node's CPUs. NeMo-RL lives
# in the container (CONTAINER) or in a venv (VENV); this project is found at CLIPO_ROOT.
#
# Environment (defaults in brackets):
#   RECIPE            recipe YAML, relative to CLIPO_ROOT or absolute        [set by the preset / submit.sh]
#   OVERRIDES         extra dotted overrides, whitespace separated (no quotes, no globs) []
#                     the script's own arguments are overrides too, one per argument, verbatim
#                     (`sbatch slurm/track1_qwen3b.sh 'key=a value with spaces'`)
#   CONTAINER         enroot/pyxis image with NeMo-RL (srun --container-image) []
#   MOUNTS            extra container mounts, comma separated                 []
#   VENV              venv with NeMo-RL + clipo_megatron (used without CONTAINER) []
#   CLIPO_PYTHON      Python with omegaconf that reads the recipe on this host [$VENV/bin/python, else python3]
#   NEMO_RL_ROOT      a NeMo-RL checkout on this host for `nemo_rl:` parents; mounted, exported
#                     [unset: the image's /opt/nemo-rl inside the steps]
#   CLIPO_DATA_DIR    parquet data root (train/, test/), only when the recipe's data section reads it;
#                     must exist; mounted  [$CLIPO_ROOT/data/clipo, the recipes' fallback data/clipo;
#                     DRY_RUN with it unset and absent: a note, the commands still print]
#   CHECKPOINT_DIR    -> checkpointing.checkpoint_dir=...; created, mounted   [the recipe's, under CLIPO_ROOT]
#   HF_HOME           Hugging Face cache (shared filesystem); exported, mounted [inherited]
#   NRL_MEGATRON_CHECKPOINT_DIR  NeMo-RL's HF->Megatron cache; exported, mounted [$HF_HOME/nemo_rl]
#   GPUS_PER_NODE     GPUs per node; must equal cluster.gpus_per_node  [SLURM_GPUS_ON_NODE, else the recipe's]
#   CPUS_PER_WORKER   --cpus-per-task of the Ray steps           [CPUTot of the first node, as ray.sub]
#   TORCH_CUDA_ARCH_LIST  needed by NeMo-RL's Megatron Policy; VENV mode only [9.0 10.0 (the image's)]
#   RAY_PORT          Ray GCS port                                            [6379]
#   RAY_WAIT_TIMEOUT_S  seconds for all nodes to join (ray.sub: 30 min)       [1800]
#   RAY_POLL_S        seconds between polls of the head's signal file         [5]
#   BASE_LOG_DIR      logs go to $BASE_LOG_DIR/<jobid>[-<restart>]-logs (shared FS) [$CLIPO_ROOT/slurm-logs]
#   SAVE_MARGIN_S     seconds before the job's time limit by which the driver has saved and
#                     stopped (CLIPO_SAVE_BY -> checkpointing.checkpoint_must_save_by); it then
#                     exits 75 and the job requeues itself (docs/slurm.md, "Time limits")  [900]
#   DRY_RUN_TIME_LEFT_S  DRY_RUN only: the time left the deadline is computed from [86400]
#   DRY_RUN=1         print the srun commands, run nothing (works off-cluster; the recipe's node
#                     count, or SLURM_JOB_NUM_NODES when set, which must then match it)

set -euo pipefail

: "${RECIPE:?RECIPE must name a recipe YAML}"
OVERRIDES="${OVERRIDES:-}"
# Overrides travel as an array and reach every `bash -c` payload quoted (%q): no word of an override
# is ever run by a shell. OVERRIDES splits on whitespace only (read -a: no globbing, no quote removal).
read -r -d '' -a OVERRIDE_ARGS <<< "$OVERRIDES" || true # -d '': past newlines too
OVERRIDE_ARGS+=("$@")
CONTAINER="${CONTAINER:-}"
MOUNTS="${MOUNTS:-}"
VENV="${VENV:-}"
USER_NEMO_RL_ROOT="${NEMO_RL_ROOT:-}" # the host's checkout, for the recipe's `nemo_rl:` parents
if [[ -d "$USER_NEMO_RL_ROOT" ]]; then USER_NEMO_RL_ROOT="$(realpath -ms -- "$USER_NEMO_RL_ROOT")"; fi
NEMO_RL_ROOT="${USER_NEMO_RL_ROOT:-/opt/nemo-rl}" # mounted at the same path when it is the host's
CHECKPOINT_DIR="${CHECKPOINT_DIR:-}"
GPUS_PER_NODE="${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}" # empty: the recipe's
RAY_PORT="${RAY_PORT:-6379}"
RAY_WAIT_TIMEOUT_S="${RAY_WAIT_TIMEOUT_S:-1800}"
RAY_POLL_S="${RAY_POLL_S:-5}"
BASE_LOG_DIR="${BASE_LOG_DIR:-$CLIPO_ROOT/slurm-logs}"
DRY_RUN="${DRY_RUN:-0}"
need_int() { # VAR...: each a positive integer (they go into arithmetic and `bash -c` payloads)
  local var
  for var in "$@"; do
    if ! [[ "${!var}" =~ ^[1-9][0-9]*$ ]]; then
      echo "[clipo] $var=${!var}: must be a positive integer" >&2
      exit 2
    fi
  done
}
SAVE_MARGIN_S="${SAVE_MARGIN_S:-900}"
need_int RAY_PORT RAY_WAIT_TIMEOUT_S SAVE_MARGIN_S
if [[ -n "$GPUS_PER_NODE" ]]; then need_int GPUS_PER_NODE; fi

if [[ "$DRY_RUN" == "1" ]]; then
  SLURM_JOB_ID="${SLURM_JOB_ID:-dryrun}"
  JOB_NODES="${SLURM_JOB_NUM_NODES:-}" # off-cluster: the recipe's count, printed as such
  if [[ -n "$JOB_NODES" ]]; then need_int JOB_NODES; fi
else
  : "${SLURM_JOB_ID:?not inside a Slurm job: submit with sbatch, or set DRY_RUN=1 to print the commands}"
  mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
  JOB_NODES=${#NODES[@]}
  if [[ -z "${CPUS_PER_WORKER:-}" ]]; then # ray.sub's detect_cpus_per_node: CPUTot of the first node
    CPUS_PER_WORKER="$(scontrol show node "${NODES[0]}" -o 2>/dev/null || true)"
    CPUS_PER_WORKER="${CPUS_PER_WORKER#*CPUTot=}"
    CPUS_PER_WORKER="${CPUS_PER_WORKER%% *}"
    if ! [[ "$CPUS_PER_WORKER" =~ ^[1-9][0-9]*$ ]]; then
      echo "[clipo] cannot read CPUTot of ${NODES[0]} from scontrol: set CPUS_PER_WORKER" >&2
      exit 2
    fi
  fi
fi
LOG_DIR="$BASE_LOG_DIR/${SLURM_JOB_ID}${SLURM_RESTART_COUNT:+-$SLURM_RESTART_COUNT}-logs"

# shellcheck source-path=SCRIPTDIR source=recipe.sh
source "$CLIPO_ROOT/slurm/recipe.sh"
RECIPE="$(abspath "$RECIPE")"
for ov in ${OVERRIDE_ARGS[@]+"${OVERRIDE_ARGS[@]}"}; do # a checkpoint dir given as an override must be mounted too
  if [[ -z "$CHECKPOINT_DIR" && "$ov" == checkpointing.checkpoint_dir=* ]]; then
    CKPT_FROM_OVERRIDES="$(abspath "${ov#*=}")"
  fi
done
if [[ -n "$CHECKPOINT_DIR" ]]; then
  CHECKPOINT_DIR="$(abspath "$CHECKPOINT_DIR")"
  OVERRIDE_ARGS+=("checkpointing.checkpoint_dir=$CHECKPOINT_DIR")
elif [[ -n "${CKPT_FROM_OVERRIDES:-}" ]]; then
  CHECKPOINT_DIR="$CKPT_FROM_OVERRIDES"
fi
# the recipe's cluster; refused here (one line, exit 2) when the allocation is another size
read_recipe ${JOB_NODES:+--job-nodes "$JOB_NODES"} ${GPUS_PER_NODE:+--job-gpus-per-node "$GPUS_PER_NODE"}
GPUS_PER_NODE="${GPUS_PER_NODE:-$RECIPE_GPUS_PER_NODE}"
if [[ "$DRY_RUN" == "1" ]]; then
  NODES=()
  for ((i = 0; i < ${JOB_NODES:-$RECIPE_NODES}; i++)); do NODES+=("node$i"); done
  CPUS_PER_WORKER="${CPUS_PER_WORKER:-$((16 * GPUS_PER_NODE))}" # off-cluster: no scontrol to ask
fi
NUM_NODES=${#NODES[@]}
HEAD_NODE="${NODES[0]}"
resolve_data_dir
need_int CPUS_PER_WORKER
if ! [[ "$RAY_POLL_S" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
  echo "[clipo] RAY_POLL_S=$RAY_POLL_S: must be a number of seconds" >&2
  exit 2
fi

q() { printf '%q' "$1"; } # quote a value for a `bash -c` payload
qall() { # quote each argument for a `bash -c` payload, space separated
  local a out=""
  for a in "$@"; do out+="${out:+ }$(q "$a")"; done
  printf '%s' "$out"
}

# --- the environment every step starts from ---------------------------------------------------
EXPORTS=(
  "NEMO_RL_ROOT=$(q "$NEMO_RL_ROOT")" ${CLIPO_DATA_DIR:+"CLIPO_DATA_DIR=$(q "$CLIPO_DATA_DIR")"}
  "PYTHONPATH=$(q "$CLIPO_ROOT:$NEMO_RL_ROOT")\${PYTHONPATH:+:\$PYTHONPATH}"
  "RAY_DEDUP_LOGS=0" "RAY_ENABLE_UV_RUN_RUNTIME_ENV=0" "OMP_NUM_THREADS=$(q "${OMP_NUM_THREADS:-16}")"
)
for var in HF_HOME NRL_MEGATRON_CHECKPOINT_DIR NEMO_RL_VENV_DIR; do
  if [[ -n "${!var:-}" ]]; then EXPORTS+=("$var=$(q "${!var}")"); fi
done
if [[ -n "$CONTAINER" ]]; then
  # the image sets TORCH_CUDA_ARCH_LIST itself; forward only an explicit choice
  if [[ -n "${TORCH_CUDA_ARCH_LIST:-}" ]]; then EXPORTS+=("TORCH_CUDA_ARCH_LIST=$(q "$TORCH_CUDA_ARCH_LIST")"); fi
  add_mount "$CLIPO_ROOT" "$LOG_DIR" "$CLIPO_DATA_DIR" "${HF_HOME:-}" "${NRL_MEGATRON_CHECKPOINT_DIR:-}" "$CHECKPOINT_DIR"
  add_recipe_mounts # the host's NeMo-RL checkout and the recipe's files outside the folders above
  CONTAINER_MOUNTS="$(mounts_csv)"
  # one named container per node for the whole job, as ray.sub's --container-name=ray-head/ray-worker
  CONTAINER_ARGS=(--container-image="$CONTAINER" --container-mounts="$CONTAINER_MOUNTS"
    --container-workdir="$CLIPO_ROOT" --no-container-mount-home)
  ACTIVATE="true"
elif [[ -n "$VENV" ]]; then
  # NeMo-RL's Megatron Policy raises without it (lm_policy.py); the NeMo-RL image sets "9.0 10.0"
  EXPORTS+=("TORCH_CUDA_ARCH_LIST=$(q "${TORCH_CUDA_ARCH_LIST:-9.0 10.0}")")
  CONTAINER_ARGS=()
  ACTIVATE="source $(q "$VENV/bin/activate")"
else
  echo "set CONTAINER (NeMo-RL image) or VENV (a venv with NeMo-RL and clipo_megatron)" >&2
  exit 2
fi
# --- the time limit: the driver saves and stops SAVE_MARGIN_S before it (NeMo-RL's own
# checkpoint_must_save_by, set from CLIPO_SAVE_BY when grpo_train starts) and exits 75 -------------
time_left_s() { # seconds the job has left; empty when unlimited or unknown
  if [[ "$DRY_RUN" == "1" ]]; then echo "${DRY_RUN_TIME_LEFT_S:-86400}"; return; fi
  if [[ "${SLURM_JOB_END_TIME:-}" =~ ^[1-9][0-9]*$ ]]; then # Slurm >= 23.02 exports it
    echo $((SLURM_JOB_END_TIME - $(date +%s)))
    return
  fi
  local left # squeue's %L: [D-][HH:]MM:SS, or UNLIMITED / NOT_SET
  left="$(squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null || true)"
  if [[ "$left" =~ ^(([0-9]+)-)?(([0-9]+):)?([0-9]+):([0-9]+)$ ]]; then
    echo $((10#${BASH_REMATCH[2]:-0} * 86400 + 10#${BASH_REMATCH[4]:-0} * 3600 \
      + 10#${BASH_REMATCH[5]} * 60 + 10#${BASH_REMATCH[6]}))
  fi
}
TIME_LEFT_S="$(time_left_s)"
if [[ "$TIME_LEFT_S" =~ ^-?[0-9]+$ ]]; then
  CLIPO_SAVE_BY=$(($(date +%s) + TIME_LEFT_S - SAVE_MARGIN_S))
  EXPORTS+=("CLIPO_SAVE_BY=$CLIPO_SAVE_BY")
  echo "[clipo] time limit in ${TIME_LEFT_S}s: the driver saves and stops ${SAVE_MARGIN_S}s before it (CLIPO_SAVE_BY=$CLIPO_SAVE_BY), then the job requeues itself"
else
  echo "[clipo] no time limit found (SLURM_JOB_END_TIME, squeue %L): no deadline save; checkpoints every checkpointing.save_period steps" >&2
fi
PREAMBLE="$ACTIVATE && export ${EXPORTS[*]} && cd $(q "$CLIPO_ROOT")"

step_args() { # NAME NODE [CPUS]: srun arguments of one single-node step in container NAME
  local args=(--overlap --nodes=1 --ntasks=1 -w "$2")
  if [[ -n "${3:-}" ]]; then args+=(--cpus-per-task="$3"); fi
  if [[ -n "$CONTAINER" ]]; then args+=(--container-name="$1" "${CONTAINER_ARGS[@]}"); fi
  printf '%s\0' "${args[@]}"
}
show() { # SUFFIX CMD...: print a command line (quoting only where needed), then SUFFIX verbatim
  local out="+" a suffix="$1"
  shift
  for a in "$@"; do if [[ "$a" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then out+=" $a"; else out+=" ${a@Q}"; fi; done
  printf '%s%s\n' "$out" "${suffix:+ $suffix}"
}

LD=$(q "$LOG_DIR")
DRIVER_ARGS="$(qall --config "$RECIPE" "cluster.num_nodes=$NUM_NODES" "cluster.gpus_per_node=$GPUS_PER_NODE" \
  ${OVERRIDE_ARGS[@]+"${OVERRIDE_ARGS[@]}"})"
PREFLIGHT="$PREAMBLE && python examples/run_grpo_clipo.py --validate-only --print-config $LD/config.json $DRIVER_ARGS"
# The head step: ray start (returns once the GCS listens), signal file with its address, wait for
# all nodes, then the driver in this same container; its status is the step's (ray.sub's head_cmd).
HEAD_SCRIPT="set -o pipefail; $PREAMBLE || exit 1; ip=\$(hostname --ip-address | cut -d\" \" -f1)"
HEAD_SCRIPT+="; ray start --head --disable-usage-stats --node-ip-address=\$ip --port=$RAY_PORT"
HEAD_SCRIPT+=" --num-gpus=$GPUS_PER_NODE >> $LD/ray-head.log 2>&1 || { touch $LD/ENDED; exit 1; }"
HEAD_SCRIPT+="; echo \$ip:$RAY_PORT > $LD/STARTED_RAY_HEAD"
HEAD_SCRIPT+="; python -m clipo_megatron.nemo_rl.ray_wait --nodes $NUM_NODES --timeout $RAY_WAIT_TIMEOUT_S"
HEAD_SCRIPT+=" || { touch $LD/ENDED; exit 1; }"
HEAD_SCRIPT+="; RAY_ADDRESS=\$ip:$RAY_PORT python examples/run_grpo_clipo.py $DRIVER_ARGS 2>&1 | tee $LD/driver.log"
WORKER_SCRIPT="$PREAMBLE || exit 1; until [[ -f $LD/STARTED_RAY_HEAD ]]; do [[ -f $LD/ENDED ]] && exit 1"
WORKER_SCRIPT+="; sleep $RAY_POLL_S; done; ray start --address=\$(cat $LD/STARTED_RAY_HEAD)"
WORKER_SCRIPT+=" --disable-usage-stats --num-gpus=$GPUS_PER_NODE --block"

echo "[clipo] job $SLURM_JOB_ID: $NUM_NODES nodes x $GPUS_PER_NODE GPUs ($CPUS_PER_WORKER CPUs), head $HEAD_NODE, recipe $RECIPE, logs $LOG_DIR"
describe_recipe "$(if [[ -n "$JOB_NODES" ]]; then echo "the job has $JOB_NODES"; else echo "DRY_RUN: no allocation, the recipe's count"; fi)"
if [[ -n "$CONTAINER" ]]; then echo "[clipo] mounts: $CONTAINER_MOUNTS"; fi
if [[ "$DRY_RUN" != "1" ]]; then mkdir -p "$LOG_DIR" ${CHECKPOINT_DIR:+"$CHECKPOINT_DIR"}; fi

# 0. preflight: validate the recipe before spending GPU time; on failure stop here, nothing started
mapfile -d '' -t ARGS < <(step_args ray-head "$HEAD_NODE")
if [[ "$DRY_RUN" == "1" ]]; then show "" srun "${ARGS[@]}" bash -c "$PREFLIGHT"; else
  set +e
  srun "${ARGS[@]}" bash -c "$PREFLIGHT"
  rc=$?
  set -e
  if ((rc != 0)); then
    echo "[clipo] preflight failed (exit $rc): the recipe did not validate, see the message above;" \
      "no Ray cluster was started. Reproduce: python examples/run_grpo_clipo.py --validate-only $DRIVER_ARGS" >&2
    exit "$rc"
  fi
fi

# 1. Ray head + driver on node 0 (background), 2. workers on the others (each blocks)
mapfile -d '' -t ARGS < <(step_args ray-head "$HEAD_NODE" "$CPUS_PER_WORKER")
if [[ "$DRY_RUN" == "1" ]]; then show "&" srun "${ARGS[@]}" bash -c "$HEAD_SCRIPT"; else
  srun "${ARGS[@]}" bash -c "$HEAD_SCRIPT" &
  HEAD_PID=$!
fi
for ((i = 1; i < NUM_NODES; i++)); do
  mapfile -d '' -t ARGS < <(step_args ray-worker "${NODES[$i]}" "$CPUS_PER_WORKER")
  if [[ "$DRY_RUN" == "1" ]]; then
    show "> $(q "$LOG_DIR/ray-worker-$i.log") 2>&1 &" srun "${ARGS[@]}" bash -c "$WORKER_SCRIPT"
  else
    srun "${ARGS[@]}" bash -c "$WORKER_SCRIPT" > "$LOG_DIR/ray-worker-$i.log" 2>&1 &
  fi
done
if [[ "$DRY_RUN" == "1" ]]; then
  echo "+ trap on_usr1 USR1  # #SBATCH --signal=B:USR1@<s>: driver still running -> scontrol requeue $SLURM_JOB_ID"
  echo "+ wait \$HEAD_PID  # exit 75 (saved at CLIPO_SAVE_BY) -> scontrol requeue $SLURM_JOB_ID; preemption: #SBATCH --requeue"
  exit 0
fi
echo "[clipo] attach: srun --overlap --jobid $SLURM_JOB_ID -w $HEAD_NODE${CONTAINER:+ --container-name=ray-head} --pty bash"

# 3. the job ends with the head step (= the driver); workers see ENDED, Slurm reaps the rest.
# Exit 75: the driver saved at the deadline short of its last step -> requeue (the rerun resumes
# there). USR1 (#SBATCH --signal=B:USR1@<s>, to this shell only: Ray is left alone) with the driver
# still running: its deadline save did not happen in time -> requeue now, or the limit would end the
# chain; the rerun resumes from the last complete checkpoint (NeMo-RL ignores an unfinished tmp_step_N).
REQUEUED=0
requeue() { # WHY
  if ((REQUEUED)); then return; fi
  REQUEUED=1
  echo "[clipo] $1: requeueing job $SLURM_JOB_ID; it resumes from the latest checkpoint"
  scontrol requeue "$SLURM_JOB_ID" || echo "[clipo] scontrol requeue failed: submit the same command again to resume" >&2
}
INTERRUPTED=0
# shellcheck disable=SC2317 # run by the USR1 trap
on_usr1() {
  INTERRUPTED=1
  requeue "USR1 (the time limit is near) and the driver still runs"
}
trap on_usr1 USR1
set +e
while :; do # a trapped signal ends `wait` early: wait again for the driver's own status
  INTERRUPTED=0
  wait "$HEAD_PID"
  rc=$?
  ((INTERRUPTED)) || break
done
set -e
touch "$LOG_DIR/ENDED"
echo "[clipo] driver exited with $rc (log $LOG_DIR/driver.log)"
if ((rc == 75)); then requeue "the driver saved at the deadline (exit 75)"; fi
exit "$rc"
