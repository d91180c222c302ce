#!/usr/bin/env bash
# The NeMo-RL contract suite: this project against NeMo-RL's own code, on CPU.
#
#   NEMO_RL_SRC=/path/to/RL bash scripts/test_nemo_rl.sh [pytest args]
#
# NEMO_RL_SRC is a checkout of https://github.com/NVIDIA-NeMo/RL (any commit: the suite states which
# it ran against). The script builds .venv_nemo_rl (Python >= 3.12, NeMo-RL's light dependencies at the
# versions of NEMO_RL_SRC/uv.lock, this package with its Megatron-Core CPU policy), puts NEMO_RL_SRC on
# PYTHONPATH (NeMo-RL is never copied into this project) and runs `pytest -m nemo_rl tests/nemo_rl`:
# NeMo-RL's real grpo_train, Policy, RayWorkerGroup on a CPU RayVirtualCluster, setup_response_data,
# Logger and CheckpointManager, for every objective with CLIPO on and off (docs/nemo_rl.md).
# NEMO_RL_VENV_ONLY=1: build the environment, print its path as the last line and exit (the
# real-worker overlay of scripts/test_real_worker.sh sits on top of it).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${NEMO_RL_SRC:-}" ] || [ ! -f "${NEMO_RL_SRC}/nemo_rl/__init__.py" ]; then
  echo "NEMO_RL_SRC must point at a NeMo-RL checkout (git clone https://github.com/NVIDIA-NeMo/RL);" >&2
  echo "got '${NEMO_RL_SRC:-}'. Example: NEMO_RL_SRC=\$HOME/RL bash scripts/test_nemo_rl.sh" >&2
  exit 2
fi
NEMO_RL_SRC=$(cd "$NEMO_RL_SRC" && pwd)
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
if [ -n "${NEMO_RL_VENV_ONLY:-}" ]; then  # scripts/test_real_worker.sh: build, name the venv, stop
  echo "$VENV"; exit 0
fi
echo "[test_nemo_rl] NeMo-RL: $NEMO_RL_SRC ($(git -C "$NEMO_RL_SRC" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'))"
"$VENV/bin/python" -c 'import omegaconf, pydantic, ray, transformers, torch; print("[test_nemo_rl] omegaconf", omegaconf.__version__, "pydantic", pydantic.__version__, "ray", ray.__version__, "transformers", transformers.__version__, "torch", torch.__version__)'
# NeMo-RL from its checkout, this project from this checkout -- in the driver and in every Ray actor.
export NEMO_RL_SRC PYTHONPATH="$NEMO_RL_SRC:$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
paths=(tests/nemo_rl)  # unless the caller names test paths
for a in "$@"; do [[ "$a" == tests/* ]] && paths=(); done
exec "$VENV/bin/python" -m pytest -q -p no:warnings --timeout=1800 -m nemo_rl "${paths[@]}" "$@"
