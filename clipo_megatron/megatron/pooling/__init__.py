# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Pooling the response hidden states, in one room: the masked mean (partial sums, pure
torch), its SP / CP / packed-THD all-reduce, the positions pooled, and the microbatch pooler
that tees the logprob pass."""
