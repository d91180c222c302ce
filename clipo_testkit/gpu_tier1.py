# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""GPU acceptance kit, tier 1: torch + megatron-core only, one process per GPU (torchrun).

    torchrun --nproc_per_node=<GPUs> -m clipo_testkit.gpu_tier1 [--summary FILE]

(`scripts/check_gpu.sh --tier 1` runs exactly this.) Three parts, all on the GPUs:

a. equivalence  `parallel_checks` over NCCL with world = the GPUs present (TP = world),
                every check against one host process; a table (check, max |diff|, pass/fail).
b. bf16         the logprob pass in bf16 vs fp32 from the same weights, pooled by the
                `MicrobatchPooler` on the final norm; pooled error and r_CL difference
                (`bf16_capture`, tolerances justified there).
c. cost         `clipo_step` and pooling beside the logprob pass at Qwen2.5-7B shapes
                (`step_cost`): a table of times, never an assertion.

a runs on every rank; b and c run on rank 0 alone, after the groups are rebuilt with
TP = 1. Exit status: 0 when a and b pass, 1 otherwise, 2 without CUDA. The same
functions run on CPU over gloo under `emulated_cuda()` (tests/megatron/test_gpu_tier1_on_cpu.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

PARTS = ("equivalence", "bf16", "cost")
NO_GPU = (
    "check_gpu.sh needs NVIDIA GPUs: none found (torch.cuda.device_count() == 0). Run it on a "
    "GPU node; on CPU the same checks run under emulated CUDA in `bash scripts/test.sh`."
)


def equivalence(rank: int, world: int, device) -> tuple[dict[str, float], list[str]] | None:
    """Part a: every parallel check on this rank, gathered; rank 0 gets (diffs, failures)."""
    from clipo_megatron.megatron.parallel import ensure_model_parallel
    from clipo_testkit import parallel_checks

    ensure_model_parallel(world, 1)  # the TP head reads Megatron's TP group
    mine = parallel_checks.run_checks(rank, world, device)  # host numpy arrays
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank != 0:
        return None
    return parallel_checks.compare(dict(enumerate(gathered)), world)


def equivalence_table(diffs: dict[str, float], failures: list[str], world: int) -> str:
    failed = {f.split(":")[0] for f in failures}
    lines = [
        f"parallel checks over {world} rank(s), each against one host process:",
        "| check | max abs diff | result |",
        "|---|---|---|",
    ]
    for name, d in diffs.items():
        lines.append(f"| {name} | {d:.3g} | {'FAIL' if name in failed else 'pass'} |")
    if world == 1:
        lines.append(
            "world = 1 (one GPU): nothing is parallel here; the checks still run every piece on "
            "the device under NCCL (device placement, dtypes, the collectives' size-1 paths)."
        )
    return "\n".join(lines + failures)


def bf16_part(device, *, larger: bool) -> tuple[dict, list[str], str]:
    """Part b: (report as a dict, failures, printable lines)."""
    from clipo_testkit import bf16_capture as b

    arch = b.LARGER if larger else b.SMALL
    rep = b.bf16_vs_fp32(device, arch=arch, seq=128 if larger else 64)
    text = "\n".join(
        [
            f"bf16 vs fp32 logprob pass ({arch.num_layers} layers, hidden {arch.hidden_size}, "
            f"{rep.rows} rows), pooled by the final-norm hook:",
            f"  pooled relative error  {rep.pooled_rel_err:.3g}  (tolerance {b.POOLED_RTOL:.3g} = 8 u_bf16)",
            f"  r_CL max difference    {rep.reward_max_abs:.3g}  (Lipschitz bound {rep.reward_bound:.3g}; "
            f"r_CL spread {rep.reward_spread:.3g})",
            f"  logprob max difference {rep.logprob_max_abs:.3g}  (for context)",
        ]
    )  # fmt: skip
    return asdict(rep), rep.failures(), text


def cost_part(device, shapes, *, repeats: int, events: bool) -> tuple[list, str]:
    """Part c: (rows, table)."""
    from clipo_testkit import step_cost

    rows = step_cost.step_cost(device, shapes, repeats=repeats, events=events)
    head = (
        f"CLIPO's cost beside the logprob pass, one device holding all {shapes.rows} rows "
        f"(groups of {shapes.group}, prompt {shapes.prompt_len} + response {shapes.response_len} "
        f"tokens); see clipo_testkit/step_cost.py for what is measured and what estimated:"
    )
    return rows, head + "\n" + step_cost.share_table(rows)


def run_tier1(
    rank: int, world: int, device, *, parts=PARTS, shapes=None, larger_bf16: bool = True,
    repeats: int = 10, events: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Every part on this rank (torch.distributed already initialised); rank 0's summary holds
    everything, other ranks' only part a's participation. Prints on rank 0."""
    from clipo_megatron.megatron.parallel import reset_model_parallel
    from clipo_testkit import step_cost

    summary: dict[str, Any] = {"world": world, "device": str(device), "failures": []}
    say = print if rank == 0 else (lambda *_a, **_k: None)
    if "equivalence" in parts:
        out = equivalence(rank, world, device)
        if out is not None:
            diffs, failures = out
            summary["equivalence"] = {"diffs": diffs, "failures": failures}
            summary["failures"] += failures
            say(equivalence_table(diffs, failures, world), flush=True)
    reset_model_parallel(1, 1)  # b and c: one model copy per rank, no TP
    if rank == 0 and "bf16" in parts:
        try:
            rep, failures, text = bf16_part(device, larger=larger_bf16)
            summary["bf16"] = {**rep, "failures": failures}
        except Exception:  # reported, and the other parts still run
            failures, text = [f"bf16: raised\n{traceback.format_exc(limit=8)}"], ""
        summary["failures"] += failures
        say(text, *failures, sep="\n", flush=True)
    if rank == 0 and "cost" in parts:
        try:
            rows, table = cost_part(
                device, shapes or step_cost.QWEN7B_SHAPES, repeats=repeats, events=events
            )
            summary["cost"] = [{"part": p, "how": h, "ms": ms} for p, h, ms in rows]
        except Exception:  # a benchmark that cannot run is a failure to report, not a hang
            table = f"cost: raised\n{traceback.format_exc(limit=8)}"
            summary["failures"].append(table)
        say(table, flush=True)
    dist.barrier()
    summary["ok"] = not summary["failures"]
    return summary


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {PARTS}")
    p.add_argument("--summary", help="write rank 0's summary (JSON) here")
    p.add_argument("--repeats", type=int, default=10, help="timed runs per part c item (median)")
    p.add_argument("--rows", type=int, default=8192, help="part c: rollouts in the step")
    p.add_argument("--response-len", type=int, default=1024, help="part c: response tokens")
    p.add_argument("--small-bf16", action="store_true", help="part b on the 2-layer model")
    a = p.parse_args(argv)
    a.parts = tuple(x for x in a.parts.split(",") if x)
    bad = set(a.parts) - set(PARTS)
    if bad:
        p.error(f"unknown parts {sorted(bad)}; choose from {PARTS}")
    return a


def _mcore_version() -> str:
    import megatron.core

    return str(getattr(megatron.core, "__version__", "unknown"))


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print(NO_GPU, file=sys.stderr)
        return 2
    from dataclasses import replace

    from clipo_testkit import step_cost

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    if "MASTER_ADDR" not in os.environ:  # plain `python -m` on one GPU
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    # fp32 means fp32: the parallel checks compare with a host reference at 1e-5, and TF32
    # matmuls (10-bit mantissa) would fail them for reasons that are not CLIPO's.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group(
        "nccl", rank=rank, world_size=world, device_id=device, timeout=timedelta(minutes=30)
    )  # the other ranks wait at a barrier while rank 0 runs parts b and c
    shapes = replace(step_cost.QWEN7B_SHAPES, rows=a.rows, response_len=a.response_len)
    try:
        summary = run_tier1(
            rank, world, device, parts=a.parts, shapes=shapes, larger_bf16=not a.small_bf16,
            repeats=a.repeats, events=True,
        )  # fmt: skip
        ok = [summary["ok"]]
        dist.broadcast_object_list(ok, src=0)  # every rank exits with rank 0's verdict
    finally:
        dist.destroy_process_group()
    if rank == 0:
        summary["gpu"] = torch.cuda.get_device_name(device)
        summary["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda})"
        summary["megatron_core"] = _mcore_version()
        if a.summary:
            with open(a.summary, "w") as f:
                json.dump(summary, f, indent=1, default=str)
        print(f"tier 1: {'PASS' if summary['ok'] else 'FAIL'}", flush=True)
    return 0 if ok[0] else 1


if __name__ == "__main__":
    sys.exit(main())
