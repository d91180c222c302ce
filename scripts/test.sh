#!/usr/bin/env bash
# The test suite, as CI runs it: builds the environments, then
#   1. every test under Python 3.11 / megatron-core 0.16 (hook capture path),
#   2. the Megatron tests under Python 3.12 / megatron-core >= 0.18 (output_processor path).
# Extra arguments go to both pytest runs (e.g. -m "not slow" for a quick pass).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh --mcore-latest
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
status=0
echo "== ruff check"
.venv/bin/ruff check . || status=$?
echo "== pytest: Python 3.11, megatron-core $(.venv/bin/python -c 'import megatron.core as m; print(m.__version__)' 2>/dev/null)"
.venv/bin/python -m pytest -q -p no:warnings --timeout=900 "$@" || status=$?
echo "== pytest: Python 3.12, megatron-core $(.venv312/bin/python -c 'import megatron.core as m; print(m.__version__)' 2>/dev/null) (Megatron tests)"
.venv312/bin/python -m pytest -q -p no:warnings --timeout=900 -m mcore tests/megatron "$@" || status=$?
exit $status
