#!/usr/bin/env bash
# GPU acceptance kit: CLIPO's GPU code on the GPUs of this node (no hub access needed).
#
#   bash scripts/check_gpu.sh [--tier 1|2|all] [-- extra args for tier 1]
#   PYTHON=/path/to/python bash scripts/check_gpu.sh          # default: python3
#
# Tier 1 (torch + megatron-core): torchrun over every GPU here running
#   clipo_testkit/gpu_tier1.py: (a) the parallel checks over NCCL against one host
#   process, (b) the bf16 logprob pass's capture against fp32, (c) the CLIPO step's cost beside
#   the logprob pass at Qwen2.5-7B shapes (a table, no assertion).
# Tier 2 (inside NeMo-RL's container): tests/nemo_rl/test_gpu_contract.py, NeMo-RL's grpo_train
#   on its real MegatronPolicyWorker with this project's worker extension, sequence packing on,
#   DP = the GPUs here, 2 steps and a resume, on a tiny model written locally.
# Output: runs/check_gpu/<time>/ (tier1.log, tier1.json, tier2.log, summary.md); CHECK_GPU_OUT
# overrides it. Exit: 0 all selected tiers passed, 1 a tier failed, 2 this node cannot run it.
# See docs/megatron.md, "GPU acceptance kit".
set -uo pipefail
cd "$(dirname "$0")/.."
TIER=all
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tier) TIER=${2:-}; shift 2 ;;
    --tier=*) TIER=${1#--tier=}; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check_gpu.sh: unknown argument '$1' (use --tier 1|2|all)" >&2; exit 2 ;;
  esac
done
case "$TIER" in 1|2|all) ;; *) echo "check_gpu.sh: --tier must be 1, 2 or all, got '$TIER'" >&2; exit 2 ;; esac
PY=${PYTHON:-python3}

# --- GPUs: nvidia-smi and torch must both see them --------------------------------------------
SMI=0
if command -v nvidia-smi >/dev/null 2>&1; then SMI=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || true)
if [ -z "$NGPU" ] || [ "$NGPU" = 0 ]; then
  if [ "$SMI" -gt 0 ]; then
    if [ -z "$NGPU" ]; then
      echo "check_gpu.sh: nvidia-smi lists $SMI GPU(s) but '$PY' cannot import torch: install a CUDA build of torch there, or set PYTHON= to the interpreter that has one (in NeMo-RL's container, its venv's python)." >&2
    else
      echo "check_gpu.sh: nvidia-smi lists $SMI GPU(s) but torch.cuda.device_count() == 0 in '$PY' (torch $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null)): install a CUDA build of torch, or check CUDA_VISIBLE_DEVICES." >&2
    fi
  else
    echo "check_gpu.sh needs NVIDIA GPUs: none found (torch.cuda.device_count() == 0). Run it on a GPU node; on CPU the same checks run under emulated CUDA in \`bash scripts/test.sh\`." >&2
  fi
  exit 2
fi
if ! "$PY" -c 'import megatron.core' 2>/dev/null; then
  echo "check_gpu.sh: '$PY' cannot import megatron.core: pip install -e \".[megatron]\" in that environment (or set PYTHON=)." >&2
  exit 2
fi
if ! "$PY" -c 'import pytest' 2>/dev/null && [ "$TIER" != 1 ]; then
  echo "check_gpu.sh: tier 2 runs under pytest, which '$PY' cannot import: pip install pytest (or use --tier 1)." >&2
  exit 2
fi
if [ "$TIER" != 1 ] && ! "$PY" -c 'import nemo_rl.algorithms.grpo, ray, megatron.bridge' 2>/dev/null; then
  echo "check_gpu.sh: tier 2 needs NeMo-RL, Ray and Megatron-Bridge importable from '$PY': run it inside nvcr.io/nvidia/nemo-rl:v0.7.0 (or a main build) with PYTHON= its venv's python, or use --tier 1. $("$PY" -c 'import nemo_rl.algorithms.grpo, ray, megatron.bridge' 2>&1 | tail -1)" >&2
  exit 2
fi

export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"  # this checkout (the package and clipo_testkit, which pip does not install), in every process and Ray actor
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
OUT=${CHECK_GPU_OUT:-runs/check_gpu/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
echo "[check_gpu] $NGPU GPU(s); python $PY; results in $OUT"
declare -A RESULT
status=0

if [ "$TIER" = 1 ] || [ "$TIER" = all ]; then
  echo "== tier 1: torchrun --nproc_per_node=$NGPU -m clipo_testkit.gpu_tier1"
  "$PY" -m torch.distributed.run --standalone --nproc_per_node="$NGPU" \
    -m clipo_testkit.gpu_tier1 --summary "$OUT/tier1.json" "${EXTRA[@]}" 2>&1 | tee "$OUT/tier1.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 0 ]; then RESULT[1]="PASS"; else RESULT[1]="FAIL (exit $rc)"; status=1; fi
fi
if [ "$TIER" = 2 ] || [ "$TIER" = all ]; then
  echo "== tier 2: pytest -m 'gpu and nemo_rl' tests/nemo_rl/test_gpu_contract.py"
  "$PY" -m pytest -q -s -rs -p no:cacheprovider -m "gpu and nemo_rl" \
    tests/nemo_rl/test_gpu_contract.py 2>&1 | tee "$OUT/tier2.log"
  rc=${PIPESTATUS[0]}
  last=$(grep -E '(passed|failed|skipped|error)' "$OUT/tier2.log" | tail -1)
  if [ "$rc" = 0 ] && [[ "$last" == *passed* ]] && [[ "$last" != *skipped* ]]; then RESULT[2]="PASS"
  else RESULT[2]="FAIL (exit $rc: $last)"; status=1; fi
fi

{
  echo "# check_gpu.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "- node: $(hostname); GPUs: $(nvidia-smi -L 2>/dev/null | tr '\n' ';')"
  echo "- python: $PY; $("$PY" -c 'import torch, megatron.core as m; print("torch", torch.__version__, "CUDA", torch.version.cuda, "| megatron-core", m.__version__)' 2>/dev/null)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  for t in 1 2; do [ -n "${RESULT[$t]:-}" ] && echo "- tier $t: ${RESULT[$t]} (log: $OUT/tier$t.log)"; done
} > "$OUT/summary.md"
echo "== summary ($OUT/summary.md)"
cat "$OUT/summary.md"
exit $status
