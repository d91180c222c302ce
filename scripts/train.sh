#!/usr/bin/env bash
# The embedded default: CLIPO and the GRPO baseline trained from the same seed on CPU
# (SmolLM2-135M-Instruct, offline arithmetic from reasoning-gym), one after the other, each
# evaluated on the held-out and the perturbed held-out set; then one table side by side
# (runs/cpu_demo/compare.md: CLIPO | GRPO | difference) and the curves overlaid.
# Extra arguments go to `clipo-megatron compare`: options (`--seeds 0,1,2`, `--objectives dapo`)
# and OmegaConf dotted overrides for both runs (`train.steps=20`). Rerun the same command after a
# stop: finished runs are skipped, an unfinished one resumes from its checkpoint.
# One run alone: `.venv/bin/clipo-megatron train --config examples/configs/cpu_demo.yaml [clipo.enabled=false]`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
source scripts/preload.sh  # tcmalloc + Intel OpenMP when present (CLIPO_NO_PRELOAD=1: off)
exec .venv/bin/clipo-megatron compare --config examples/configs/cpu_demo.yaml \
    --objectives grpo --seeds 0 --out runs/cpu_demo "$@"
