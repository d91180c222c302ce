# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
# shellcheck shell=bash
# What a job takes from its recipe, shared by common.sh (inside the job) and submit.sh (before it).
# The rules live in clipo_megatron/nemo_rl/guard/recipe_cluster.py: the nodes and GPUs per node
# (cluster.num_nodes / gpus_per_node through the `defaults:` chain and the overrides), the allocation
# they must equal, the chain's files, whether the data section reads CLIPO_DATA_DIR. It runs on this
# host with CLIPO_PYTHON (default $VENV/bin/python, else python3; it needs omegaconf, no torch), and
# with NEMO_RL_ROOT as given (a NeMo-RL checkout on this host for `nemo_rl:` parents; then mounted).
# Needs: CLIPO_ROOT, RECIPE (absolute), OVERRIDE_ARGS, USER_NEMO_RL_ROOT, DRY_RUN.

read_recipe() { # [--job-nodes N] [--job-gpus-per-node G]: sets RECIPE_* (one line and exit 2 on a problem)
  local py="${CLIPO_PYTHON:-}" out key value host_root=""
  # NEMO_RL_ROOT only when it is on this host (a path inside the image cannot be read from here)
  if [[ -d "$USER_NEMO_RL_ROOT" ]]; then host_root="$USER_NEMO_RL_ROOT"; fi
  if [[ -z "$py" && -n "${VENV:-}" ]]; then py="$VENV/bin/python"; fi
  py="${py:-python3}"
  if ! command -v "$py" > /dev/null; then
    echo "[clipo] $py not found, and reading the recipe's cluster needs it: set CLIPO_PYTHON to a Python with omegaconf" >&2
    exit 2
  fi
  out="$(PYTHONPATH="$CLIPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" NEMO_RL_ROOT="$host_root" \
    "$py" -m clipo_megatron.nemo_rl.guard.recipe_cluster "$@" -- "$RECIPE" \
    ${OVERRIDE_ARGS[@]+"${OVERRIDE_ARGS[@]}"})" || exit 2
  RECIPE_FILES=()
  while IFS=$'\t' read -r key value; do
    case "$key" in
      nodes) RECIPE_NODES="$value" ;;
      gpus_per_node) RECIPE_GPUS_PER_NODE="$value" ;;
      nodes_from) RECIPE_NODES_FROM="$value" ;;
      reads_clipo_data_dir) RECIPE_READS_DATA="$value" ;;
      file) RECIPE_FILES+=("$value") ;;
    esac
  done <<< "$out"
}

# CLIPO_DATA_DIR, asked for only when the recipe's data section reads it: made absolute (relative
# to CLIPO_ROOT, as the recipes' fallback data/clipo is), and it must exist; empty when not read.
resolve_data_dir() {
  if [[ "$RECIPE_READS_DATA" != "1" ]]; then
    DATA_NOTE="CLIPO_DATA_DIR: not read by this recipe (no \${oc.env:CLIPO_DATA_DIR} in its data section)${CLIPO_DATA_DIR:+; $CLIPO_DATA_DIR ignored}"
    CLIPO_DATA_DIR=""
    return
  fi
  local given="${CLIPO_DATA_DIR:+1}"
  CLIPO_DATA_DIR="${CLIPO_DATA_DIR:-$CLIPO_ROOT/data/clipo}"
  CLIPO_DATA_DIR="$(abspath "$CLIPO_DATA_DIR")" # mounted at this path
  DATA_NOTE="CLIPO_DATA_DIR=$CLIPO_DATA_DIR (the recipe's data section reads it)"
  if [[ ! -d "$CLIPO_DATA_DIR" && "$DRY_RUN" == "1" && -z "$given" ]]; then
    # The documented `DRY_RUN=1 CONTAINER=img bash slurm/...` in a fresh checkout: print anyway.
    echo "[clipo] note: CLIPO_DATA_DIR is unset and its default $CLIPO_DATA_DIR does not exist; a real job stops here: set CLIPO_DATA_DIR to the parquet root (train/, test/)" >&2
  elif [[ ! -d "$CLIPO_DATA_DIR" ]]; then
    echo "[clipo] CLIPO_DATA_DIR=$CLIPO_DATA_DIR: no such directory; set CLIPO_DATA_DIR to the parquet root (train/, test/)" >&2
    exit 2
  fi
}

abspath() { # relative to CLIPO_ROOT (the driver's working directory), `..` folded, links kept
  if [[ "$1" == /* ]]; then realpath -ms -- "$1"; else realpath -ms -- "$CLIPO_ROOT/$1"; fi
}

MOUNT_LIST=()
add_mount() { # PATH...: bind each at the same path unless a mounted dir already holds it
  local p m
  for p in "$@"; do
    if [[ -z "$p" ]]; then continue; fi
    for m in ${MOUNT_LIST[@]+"${MOUNT_LIST[@]}"}; do if [[ "$p" == "$m" || "$p" == "$m"/* ]]; then continue 2; fi; done
    MOUNT_LIST+=("$p")
  done
}
add_recipe_mounts() { # the host's NeMo-RL checkout (when given), then each file of the recipe's chain
  if [[ -n "$USER_NEMO_RL_ROOT" && -d "$USER_NEMO_RL_ROOT" ]]; then add_mount "$(abspath "$USER_NEMO_RL_ROOT")"; fi
  local before=${#MOUNT_LIST[@]}
  add_mount "${RECIPE_FILES[@]}"
  RECIPE_MOUNTED=("${MOUNT_LIST[@]:before}")
}
mounts_csv() { # the mount list as srun's / ray.sub's `src:dst,...`, then MOUNTS
  local m out=""
  for m in "${MOUNT_LIST[@]}"; do out="${out:+$out,}$m:$m"; done
  printf '%s' "$out${MOUNTS:+,$MOUNTS}"
}

describe_recipe() { # JOB_NODES_TEXT: where the node count came from, the files, the data (stdout)
  echo "[clipo] nodes: $RECIPE_NODES x $RECIPE_GPUS_PER_NODE GPUs, from $RECIPE_NODES_FROM; $1"
  if [[ -z "${CONTAINER:-}" ]]; then
    echo "[clipo] recipe files: read in place (VENV: the nodes share this filesystem); copied: none"
  elif ((${#RECIPE_MOUNTED[@]})); then
    echo "[clipo] recipe files mounted into the container (outside the mounted folders): ${RECIPE_MOUNTED[*]}; copied: none"
  else
    echo "[clipo] recipe files: all under mounted folders ($RECIPE); copied: none"
  fi
  echo "[clipo] $DATA_NOTE"
}
