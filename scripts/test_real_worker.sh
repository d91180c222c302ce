#!/usr/bin/env bash
# NeMo-RL's own Megatron policy worker (with this project's extension) on CPU: docs/nemo_rl.md,
# "NeMo-RL's real worker on CPU".
#
#   NEMO_RL_SRC=<RL checkout> BRIDGE_SRC=<Megatron-Bridge checkout> \
#   MEGATRON_LM_SRC=<Megatron-LM checkout> bash scripts/test_real_worker.sh [pytest args]
#   ... bash scripts/test_real_worker.sh --bench [--rows 64] [--repeats 7]   (CLIPO's capture cost)
#
# On top of the contract environment (scripts/test_nemo_rl.sh builds it; NEMO_RL_VENV_ONLY=1) an
# overlay directory holds what the real worker's imports need and the contract suite does not:
# transformers in the range both NeMo-RL's uv.lock and Bridge accept (Bridge: >= 5.8; the lock
# lists 5.8.1), einops, nvidia-modelopt 0.47.0 with pulp / orloge / cpsat-logutils (all
# --no-deps: their GPU dependencies stay out). Bridge is used from BRIDGE_SRC/src and Megatron-Core
# from MEGATRON_LM_SRC/megatron/core (Bridge's Megatron-LM pin: megatron-core 0.19.2 from PyPI lacks
# FullyShardedDataParallelV1, which the worker imports), both on PYTHONPATH ahead of the venv,
# never copied here. TransformerEngine is not installed: the tests hand Bridge an import stub
# (tests/nemo_rl/real_worker/te_stub.py) that raises the moment a TE layer is used.
set -euo pipefail
cd "$(dirname "$0")/.."
need() {  # need VAR file-inside -> exit 2 with one line if the checkout is missing
  local v=$1 f=$2
  if [ -z "${!v:-}" ] || [ ! -e "${!v}/$f" ]; then
    echo "$v must point at a checkout containing $f (got '${!v:-}'); see docs/nemo_rl.md" >&2
    exit 2
  fi
}
need NEMO_RL_SRC nemo_rl/__init__.py
need BRIDGE_SRC src/megatron/bridge/__init__.py
need MEGATRON_LM_SRC megatron/core/__init__.py
NEMO_RL_SRC=$(cd "$NEMO_RL_SRC" && pwd)
BRIDGE_SRC=$(cd "$BRIDGE_SRC" && pwd)
MEGATRON_LM_SRC=$(cd "$MEGATRON_LM_SRC" && pwd)
export PIP_DISABLE_PIP_VERSION_CHECK=1

VENV=$(NEMO_RL_VENV_ONLY=1 NEMO_RL_SRC="$NEMO_RL_SRC" bash scripts/test_nemo_rl.sh | tail -1)
OVERLAY_PKGS="transformers==${TRANSFORMERS_REAL_WORKER:-5.8.1} einops nvidia-modelopt==0.47.0 pulp orloge cpsat-logutils"
OVERLAY=.venv_real_worker-$(echo "$VENV $OVERLAY_PKGS" | sha256sum | cut -c1-16)
if [ -f "$OVERLAY/.stamp" ]; then
  echo "[test_real_worker] $OVERLAY is up to date"
else
  echo "[test_real_worker] building $OVERLAY over $VENV: $OVERLAY_PKGS (--no-deps)"
  rm -rf "$OVERLAY"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q --no-deps --target "$OVERLAY" $OVERLAY_PKGS
  echo "$OVERLAY_PKGS" > "$OVERLAY/.stamp"
fi
rev() {  # the checkout's commit, or its directory name when it is not a git work tree of its own
  if [ -e "$1/.git" ]; then git -C "$1" rev-parse --short HEAD; else basename "$1"; fi
}
echo "[test_real_worker] NeMo-RL $(rev "$NEMO_RL_SRC"), Bridge $(rev "$BRIDGE_SRC"), Megatron-LM $(rev "$MEGATRON_LM_SRC")"
export NEMO_RL_SRC BRIDGE_SRC MEGATRON_LM_SRC CLIPO_REAL_WORKER_OVERLAY="$(pwd)/$OVERLAY"
# this checkout first: NeMo-RL has a `tests` package of its own
export PYTHONPATH="$(pwd):$MEGATRON_LM_SRC:$BRIDGE_SRC/src:$(pwd)/$OVERLAY:$NEMO_RL_SRC${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
if [ "${1:-}" = "--bench" ]; then  # bench/bench_real_worker_capture.py in this environment
  shift
  exec "$VENV/bin/python" bench/bench_real_worker_capture.py "$@"
fi
paths=(tests/nemo_rl/real_worker)  # unless the caller names test paths
for a in "$@"; do [[ "$a" == tests/* ]] && paths=(); done
exec "$VENV/bin/python" -m pytest -q -p no:warnings --timeout=1800 -m nemo_rl "${paths[@]}" "$@"
