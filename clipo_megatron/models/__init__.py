# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""HF <-> Megatron-Core weight conversion (Llama / Qwen2 layouts) and the bundled SmolLM2."""
