# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One process per rank for NeMo-RL's real worker: it initialises torch.distributed itself.

Unlike tests/megatron/dist_utils.py (which creates the gloo group for the function), the worker's
own `setup_distributed` creates it (gloo through cpu_patches), from RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT / LOCAL_RANK set here, as Ray sets them for a worker.

A rank that exits without handing back a result fails the run with its exit code: Bridge's
checkpoint load calls `sys.exit()` with code 0 on some errors (checkpointing.py, the CPU RNG
state), which must not read as a pass.
"""

from __future__ import annotations

import io
import os
import socket
import traceback
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, fn, args, queue, emulated=False):
    try:
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        import torch

        torch.set_num_threads(1)
        from clipo_testkit.nemo_rl.real_worker.cpu_patches import cpu_worker_patches
        from clipo_testkit.nemo_rl.real_worker.te_stub import import_bridge

        import_bridge()
        with cpu_worker_patches(rank, emulated=emulated):
            out = fn(rank, world, *args)
        buf = io.BytesIO()  # bytes, not shared-memory tensors: this process exits right after
        torch.save(out, buf)
        queue.put((rank, "ok", buf.getvalue()))
    except BaseException:  # noqa: BLE001 - SystemExit included: reported, not swallowed
        queue.put((rank, "error", traceback.format_exc()))


def run_ranks(fn, world: int, *args, timeout: float = 1500.0, emulated: bool = False) -> dict:
    """fn(rank, world, *args) in `world` spawned processes (inside cpu_worker_patches) -> {rank: out}.
    emulated: under `clipo_testkit.emulated_cuda` (cpu_worker_patches). The rendezvous port is free when
    picked, but another job on the machine may bind it before rank 0 does: that start (nothing
    has run yet) is retried on a new port, twice at most."""
    for attempt in range(3):
        try:
            return _run_ranks_once(fn, world, args, timeout, emulated)
        except RuntimeError as e:
            if "EADDRINUSE" not in str(e) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _run_ranks_once(fn, world: int, args: tuple, timeout: float, emulated: bool) -> dict:
    import queue as queue_mod

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_entry, args=(r, world, port, fn, args, queue, emulated))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: list[str] = []
    try:
        while len(results) < world and not errors:
            try:
                rank, status, payload = queue.get(timeout=10)
            except queue_mod.Empty:
                silent = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode is not None]
                silent = [(i, c) for i, c in silent if i not in results]
                if silent:
                    errors.append(
                        f"rank(s) exited without a result (exit codes {silent}): a sys.exit() "
                        "inside NeMo-RL / Bridge (e.g. Bridge's checkpoint load on an RNG state)"
                    )
                timeout -= 10
                if timeout <= 0:
                    errors.append("timed out")
                continue
            if status == "ok":
                import torch

                results[rank] = torch.load(io.BytesIO(payload), weights_only=False)
            else:
                errors.append(f"rank {rank}:\n{payload}")
    finally:
        for p in procs:
            p.join(timeout=60 if not errors else 1)
            if p.is_alive():
                p.kill()
    if errors:
        raise RuntimeError("\n".join(errors))
    return results
