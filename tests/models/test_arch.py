# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""GPTArch lives below Megatron: HF conversion and generation import without megatron.core."""

import subprocess
import sys

import pytest

from clipo_megatron.models.arch import GPTArch

_BLOCK_MEGATRON = """
import sys

class BlockMegatron:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "megatron" or name.startswith("clipo_megatron.megatron"):
            raise ImportError("imported " + name)

sys.meta_path.insert(0, BlockMegatron())
import clipo_megatron.generation.factory
import clipo_megatron.generation.hf_backend
import clipo_megatron.generation.vllm_backend
import clipo_megatron.models.arch
import clipo_megatron.models.hf_convert
"""


def test_models_and_generation_import_without_megatron():
    done = subprocess.run([sys.executable, "-c", _BLOCK_MEGATRON], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1]


def test_arch_rejects_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="num_attention_heads=3"):
        GPTArch(8, 64, 1, 3, 1, 128)
    with pytest.raises(ValueError, match="num_query_groups=3"):
        GPTArch(8, 64, 1, 4, 3, 128)
