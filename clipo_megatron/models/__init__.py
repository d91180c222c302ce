# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Model descriptions below Megatron: `arch.GPTArch`, HF <-> Megatron-Core weight conversion
(Llama / Qwen2 layouts) and the bundled SmolLM2. `arch` and `hf_convert` never import
megatron.core, so generation can use them on a machine without it."""
