# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The single-machine runner's Megatron-Core model plumbing: a GPTModel on CPU (shims,
layer spec), its builder, the policy's forward passes, shared-prefix packing, TP state moves."""
