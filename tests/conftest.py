# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
import os

import pytest


@pytest.fixture(scope="session")
def mcore_single_process():
    """A world-1 gloo group with megatron's parallel_state initialised (TP = PP = 1)."""
    pytest.importorskip("megatron.core")
    import torch.distributed as dist

    from clipo_megatron.megatron.parallel import ensure_model_parallel
    from clipo_megatron.runner.model.cpu_shims import enable_cpu_shims

    if not dist.is_initialized():  # an in-memory store: no /tmp file (tempfile.mktemp races)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    enable_cpu_shims()
    ensure_model_parallel(1, 1)
    yield
    os.environ.pop("CLIPO_UNUSED", None)


def pytest_collection_modifyitems(config, items):
    """vLLM tests run last (stable order otherwise).

    Their in-process engines initialise torch.distributed themselves; Megatron tests that
    run after two such engines in one process found Megatron-Core's process groups unset.
    scripts/test.sh runs them in a pytest process of their own as well.
    """
    items.sort(key=lambda item: item.get_closest_marker("vllm") is not None)


@pytest.fixture
def check_run_calls(monkeypatch):
    """`ClipoBlock.check_run` patched to record (n, steps, leave_one_out, the driver's key for n)
    and refuse with "patched rule": a driver that goes through the one rule changes with it."""
    from clipo_megatron.core.config import ClipoBlock

    seen: list[tuple] = []

    def refuse(self, *, n, steps, leave_one_out, keys):
        seen.append((n, steps, leave_one_out, keys["n"]))
        raise ValueError("patched rule")

    monkeypatch.setattr(ClipoBlock, "check_run", refuse)
    return seen
