# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Spawn gloo process groups on CPU for equivalence tests.

spawn context, file:// rendezvous (in a private temporary directory), one thread per worker, a
join timeout, and results returned through a queue (rank -> picklable dict) *by value*: a tensor put
on a torch.multiprocessing queue travels as a shared-memory file descriptor that the parent can only
fetch while the child lives, so a child that finished before a loaded parent read its result failed
the test with `FileNotFoundError` in `resource_sharer` (seen on a loaded 2-core box).
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import traceback

import torch.multiprocessing as mp


def _entry(rank, world, init_file, fn, args, queue):
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
        )
        from clipo_megatron.runner.model.cpu_shims import enable_cpu_shims

        enable_cpu_shims()
        out = fn(rank, world, *args)
        queue.put((rank, "ok", pickle.dumps(out)))  # by value: no fd to fetch later
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # pragma: no cover - reported to the parent
        queue.put((rank, "error", traceback.format_exc()))


def run_distributed(fn, world: int, *args, timeout: float = 240.0) -> dict:
    """Run fn(rank, world, *args) in `world` gloo processes; return {rank: result}."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    tmpdir = tempfile.mkdtemp(prefix="clipo_dist_")
    init_file = os.path.join(tmpdir, "rendezvous")
    procs = [
        ctx.Process(target=_entry, args=(r, world, init_file, fn, args, queue))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results, errors = {}, []
    try:
        for _ in range(world):
            rank, status, payload = queue.get(timeout=timeout)
            if status == "ok":
                results[rank] = pickle.loads(payload)
            else:
                errors.append(f"rank {rank}:\n{payload}")
                break
    finally:
        for p in procs:
            p.join(timeout=30 if not errors else 1)
            if p.is_alive():
                p.terminate()
        shutil.rmtree(tmpdir, ignore_errors=True)
    if errors:
        raise RuntimeError("distributed worker failed:\n" + "\n".join(errors))
    return results
