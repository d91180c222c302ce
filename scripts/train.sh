#!/usr/bin/env bash
# The embedded default: a real CLIPO training run on CPU (SmolLM2-135M-Instruct,
# offline arithmetic from reasoning-gym), then evaluation, tables and plots.
# Extra arguments are OmegaConf dotted overrides, e.g. `bash scripts/train.sh train.steps=10`.
# GRPO baseline (no CLIPO): `bash scripts/train.sh clipo.enabled=false output.dir=runs/grpo`;
# another objective: `clipo.objective=dapo|gspo|gmpo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/clipo-megatron train --config examples/configs/cpu_demo.yaml "$@"
