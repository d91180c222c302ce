# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Wait until a Ray cluster has N live nodes (used by slurm/common.sh): `python -m clipo_megatron.nemo_rl.ray_wait`."""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--address", default="auto")
    args = p.parse_args(argv)
    import ray

    deadline = time.monotonic() + args.timeout
    while True:
        try:
            ray.init(address=args.address, logging_level="ERROR")
            alive = sum(1 for n in ray.nodes() if n["Alive"])
            ray.shutdown()
        except Exception:  # the head may still be starting
            alive = 0
        if alive >= args.nodes:
            print(f"[clipo] Ray cluster up: {alive} nodes")
            return 0
        if time.monotonic() > deadline:
            print(
                f"[clipo] Ray cluster has {alive}/{args.nodes} nodes after {args.timeout:.0f} s",
                file=sys.stderr,
            )
            return 1
        time.sleep(5)


if __name__ == "__main__":
    sys.exit(main())
