#!/usr/bin/env bash
# The NeMo-RL contract suite: this project against NeMo-RL's own code, on CPU.
#
#   NEMO_RL_SRC=/path/to/RL [BRIDGE_SRC=..] [MEGATRON_LM_SRC=..] bash scripts/test_nemo_rl.sh [pytest args]
#   ... bash scripts/test_nemo_rl.sh --bench [--rows 64] [--repeats 7]   (CLIPO's capture cost)
#   ... bash scripts/test_nemo_rl.sh --bench bench/bench_async_throughput.py   (async vs sync, CLIPO on/off)
#   ... bash scripts/test_nemo_rl.sh --preflight --config my_recipe.yaml [key=value ...]   (the preflight
#       with NeMo-RL importable: its version, seams and MasterConfig checked too; no cluster needed)
#
# NEMO_RL_SRC is a checkout of https://github.com/NVIDIA-NeMo/RL (any commit: the suite states which
# it ran against); BRIDGE_SRC and MEGATRON_LM_SRC default to its submodules
# (3rdparty/Megatron-Bridge-workspace/Megatron-Bridge and that one's 3rdparty/Megatron-LM, as
# `git clone --recursive` makes them). The script builds .venv_nemo_rl (Python >= 3.12, NeMo-RL's
# light dependencies at the versions of NEMO_RL_SRC/uv.lock, this package) and over it an overlay with
# what NeMo-RL's Megatron worker imports and the light set lacks: transformers in the range both
# NeMo-RL's uv.lock and Bridge accept (Bridge: >= 5.8; the lock lists 5.8.1), einops,
# nvidia-modelopt 0.47.0 with pulp / orloge / cpsat-logutils (all --no-deps: their GPU dependencies
# stay out). NeMo-RL, Bridge (BRIDGE_SRC/src) and Megatron-Core (MEGATRON_LM_SRC/megatron/core:
# Bridge's pin; megatron-core from PyPI lacks FullyShardedDataParallelV1, which the worker imports)
# go on PYTHONPATH, never copied here; TransformerEngine is not installed (the tests hand Bridge an
# import stub that raises the moment a TE layer is used). Then `pytest -m nemo_rl tests/nemo_rl`:
# NeMo-RL's real grpo_train, Policy, RayWorkerGroup on a CPU RayVirtualCluster, NeMo-RL's own
# Megatron policy worker with the CLIPO extension (clipo_testkit/nemo_rl/real_worker), setup_response_data,
# Logger and CheckpointManager, for every objective with CLIPO on and off (docs/nemo_rl.md).
set -euo pipefail
CALLER_PWD=$(pwd)  # --preflight reads --config and key=value paths from where it was called
cd "$(dirname "$0")/.."
if [ -z "${NEMO_RL_SRC:-}" ] || [ ! -f "${NEMO_RL_SRC}/nemo_rl/__init__.py" ]; then
  echo "NEMO_RL_SRC must point at a NeMo-RL checkout (git clone https://github.com/NVIDIA-NeMo/RL);" >&2
  echo "got '${NEMO_RL_SRC:-}'. Example: NEMO_RL_SRC=\$HOME/RL bash scripts/test_nemo_rl.sh" >&2
  exit 2
fi
NEMO_RL_SRC=$(cd "$NEMO_RL_SRC" && pwd)
BRIDGE_SRC=${BRIDGE_SRC:-$NEMO_RL_SRC/3rdparty/Megatron-Bridge-workspace/Megatron-Bridge}
MEGATRON_LM_SRC=${MEGATRON_LM_SRC:-$BRIDGE_SRC/3rdparty/Megatron-LM}
need() {  # need VAR file-inside -> exit 2 with one line if the checkout is missing
  local v=$1 f=$2
  if [ ! -e "${!v}/$f" ]; then
    echo "$v must point at a checkout containing $f (got '${!v}'; NeMo-RL's submodule when unset:" \
      "git -C \$NEMO_RL_SRC submodule update --init --recursive); see docs/nemo_rl.md" >&2
    exit 2
  fi
}
need BRIDGE_SRC src/megatron/bridge/__init__.py
need MEGATRON_LM_SRC megatron/core/__init__.py
BRIDGE_SRC=$(cd "$BRIDGE_SRC" && pwd)
MEGATRON_LM_SRC=$(cd "$MEGATRON_LM_SRC" && pwd)
export PIP_DISABLE_PIP_VERSION_CHECK=1

find_python() {  # the first Python >= 3.12 (NeMo-RL's grpo module needs pydantic on typing_extensions' TypedDict)
  local c
  for c in "${PYTHON_NEMO_RL:-}" python3.13 python3.12 /root/.pyenv/versions/3.13*/bin/python \
           /root/.pyenv/versions/3.12*/bin/python python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  echo "no Python >= 3.12 found (set PYTHON_NEMO_RL)" >&2; return 1
}

locked() {  # locked NAME -> NAME==<version in NeMo-RL's uv.lock>
  local v
  v=$(awk -v p="$1" '$0 == "name = \"" p "\"" { getline; if ($1 == "version") { gsub(/"/, "", $3); print $3; exit } }' \
      "$NEMO_RL_SRC/uv.lock")
  if [ -z "$v" ]; then echo "$1"; else echo "$1==${v%%+*}"; fi
}

# NeMo-RL's light dependencies: what `import nemo_rl.algorithms.grpo` and its Policy / worker group /
# data / logger / checkpoint modules need on CPU (the GPU stack -- vLLM, TransformerEngine,
# Megatron-Bridge, flash-attn, nccl -- is not installed: see docs/nemo_rl.md).
LIGHT="omegaconf hydra-core pydantic ray transformers torchdata rich pillow pyzmq nvidia-ml-py uvicorn
       fastapi mlflow swanlab wandb prometheus-client tensorboard datasets soundfile tensordict
       accelerate math-verify colored sympy"
stamp() {  # rebuild when this project's dependencies, the package list or NeMo-RL's pins change
  { sha256sum pyproject.toml; echo "$LIGHT ${TORCH_VERSION:-2.13.0}"; for p in $LIGHT; do locked "$p"; done; } \
    | sha256sum | cut -c1-16
}
# One environment per set of pins: v0.7.0 and main lock different versions (omegaconf, ray, ...).
VENV=${NEMO_RL_VENV:-.venv_nemo_rl-$(stamp)}
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$(stamp)" ]; then
  echo "[test_nemo_rl] $VENV is up to date"
else
  PY=$(find_python)
  echo "[test_nemo_rl] building $VENV with $PY ($("$PY" --version))"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "torch==${TORCH_VERSION:-2.13.0}"
  pins=()
  for p in $LIGHT; do pins+=("$(locked "$p")"); done
  "$VENV/bin/pip" install -q "${pins[@]}"
  "$VENV/bin/pip" install -q -e ".[megatron,test]" "megatron-core>=0.18" "${pins[@]}"
  stamp > "$VENV/.stamp"
fi
# TransferQueue (NeMo-RL pins its git commit of 0.1.9; PyPI's 0.1.9 here) and msgspec: the data
# plane of the TransferQueue loop's contract case (test_contract_tq.py)
OVERLAY_PKGS="transformers==${TRANSFORMERS_REAL_WORKER:-5.8.1} einops nvidia-modelopt==0.47.0 pulp orloge cpsat-logutils transferqueue==0.1.9 $(locked msgspec)"
OVERLAY=.venv_real_worker-$(echo "$VENV $OVERLAY_PKGS" | sha256sum | cut -c1-16)
if [ -f "$OVERLAY/.stamp" ]; then
  echo "[test_nemo_rl] $OVERLAY is up to date"
else
  echo "[test_nemo_rl] building $OVERLAY over $VENV: $OVERLAY_PKGS (--no-deps)"
  rm -rf "$OVERLAY"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q --no-deps --target "$OVERLAY" $OVERLAY_PKGS
  echo "$OVERLAY_PKGS" > "$OVERLAY/.stamp"
fi
rev() {  # the checkout's commit, or what names it when it is not a git work tree of its own
  if [ -e "$1/.git" ]; then git -C "$1" rev-parse --short HEAD
  else echo "no .git: $(basename "$1")"; fi
}
echo "[test_nemo_rl] NeMo-RL $NEMO_RL_SRC ($(rev "$NEMO_RL_SRC")), Bridge $(rev "$BRIDGE_SRC"), Megatron-LM $(rev "$MEGATRON_LM_SRC")"
export NEMO_RL_SRC BRIDGE_SRC MEGATRON_LM_SRC CLIPO_REAL_WORKER_OVERLAY="$(pwd)/$OVERLAY"
# this checkout first: NeMo-RL has a `tests` package of its own
export PYTHONPATH="$(pwd):$MEGATRON_LM_SRC:$BRIDGE_SRC/src:$(pwd)/$OVERLAY:$NEMO_RL_SRC${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
# Nothing is written into the sources (CI lays them read-only): bytecode goes to a tree of its own
# here (Ray's actors inherit the variable), Ray's session directory is the suite's own (tests/nemo_rl
# conftest: CLIPO_RAY_TMP), and no outer RAY_ADDRESS can point the suite at someone else's cluster.
export PYTHONPYCACHEPREFIX="$(pwd)/.cache/pycache_nemo_rl"
unset RAY_ADDRESS
"$VENV/bin/python" -c 'import omegaconf, pydantic, ray, transformers, torch; print("[test_nemo_rl] omegaconf", omegaconf.__version__, "pydantic", pydantic.__version__, "ray", ray.__version__, "transformers", transformers.__version__, "torch", torch.__version__)'
# What was proven against: the project's own recognition of the source (version, commit or probes).
"$VENV/bin/python" - <<'EOF' || echo "[test_nemo_rl] clipo_megatron does not recognise this NeMo-RL (the tests say why)"
from clipo_megatron.nemo_rl.port.compat import detect

f = detect()
print(f"[test_nemo_rl] recognised as NeMo-RL {f.name or '(unsupported)'}: version {f.version}, {f.note}")
EOF
if [ "${1:-}" = "--preflight" ]; then  # the preflight with NeMo-RL importable: all its checks on a laptop
  shift
  repo=$(pwd)
  case $VENV in /*) py=$VENV/bin/python ;; *) py=$repo/$VENV/bin/python ;; esac
  cd "$CALLER_PWD"
  NEMO_RL_ROOT=${NEMO_RL_ROOT:-$NEMO_RL_SRC} exec "$py" "$repo/examples/run_grpo_clipo.py" \
    --validate-only --no-cluster-env "$@"
fi
if [ "${1:-}" = "--bench" ]; then  # a bench in this environment (bench_real_worker_capture.py unless named)
  shift
  bench=bench/bench_real_worker_capture.py
  if [[ "${1:-}" == bench/*.py ]]; then bench=$1; shift; fi
  exec "$VENV/bin/python" "$bench" "$@"
fi
# unless the caller names test paths; NeMo-RL's own autograd Function under the emulated CUDA too
paths=(tests/nemo_rl tests/testing/test_emulated_nemo_rl.py)
for a in "$@"; do [[ "$a" == tests/* ]] && paths=(); done
marker=$(mktemp)  # anything in the sources newer than this was written by the suite
status=0
"$VENV/bin/python" -m pytest -q -p no:warnings --timeout=1800 -m nemo_rl "${paths[@]}" "$@" || status=$?
written=$(find "$NEMO_RL_SRC" "$BRIDGE_SRC" "$MEGATRON_LM_SRC" -newer "$marker" -print 2>/dev/null | head -5)
rm -f "$marker"
if [ -n "$written" ]; then
  echo "[test_nemo_rl] FAILED: the suite wrote into the NeMo-RL sources (read-only in CI):" $written >&2
  status=1
fi
exit $status
