# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""clipo_megatron: CLIPO for NeMo-RL on Megatron-Core.

Layers, with dependencies pointing one way:
core (pure torch) <- megatron (Megatron-Core pieces) <- nemo_rl / runner.
"""

__version__ = "0.1.0"
