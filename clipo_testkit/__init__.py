# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The test kit: the emulated CUDA, the parallel checks, the parity helpers, the GPU tier-1 kit,
the tiny models and the NeMo-RL harness (`nemo_rl/`: NeMo-RL's loops and its real Megatron worker
on CPU) that the tests and `bench/` share. It sits beside the package, not in it, so
`pip install .` ships only the product (tests/test_wheel.py); tests, benches, scripts and
`scripts/check_gpu.sh` import it from a checkout, whose root is on sys.path (pytest's rootdir, or
PYTHONPATH). It never imports `tests` (tests/test_house.py)."""
