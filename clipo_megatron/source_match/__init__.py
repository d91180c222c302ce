# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Reading a library's source without importing it, and the seams checked in it.

One mechanism for every place this project meets code it does not own: the NeMo-RL seams the
product checks before a run (`clipo_megatron.nemo_rl.port`)
and the lines of NeMo-RL, Megatron-Bridge and Megatron-Core the CPU contract suite stands in for.
Imports nothing of ours."""

from clipo_megatron.source_match.seam import Seam, method_seam, moved_seams, rebindable
from clipo_megatron.source_match.source import Absent, Source

__all__ = ["Absent", "Seam", "Source", "method_seam", "moved_seams", "rebindable"]
