# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Both drivers' policy losses on one batch (clipo_testkit/loss_parity.py), per objective:
a markdown table of the runner's loss, the NeMo-RL driver's loss and the largest gradient gap.

    PYTHONPATH=/work/nemo/rl-7ea279a <nemo-rl venv>/bin/python scripts/loss_parity.py \\
        [--src /path/to/old/checkout ...]

Each `--src` (default: this checkout) is a clipo_megatron tree measured in its own process, so
an older checkout gives the "before" rows. Without NeMo-RL importable, grpo / dapo / gspo have no
NeMo-RL loss to compare with (the script says so).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CASES = [  # (label, objective, runner Objective fields, NeMo-RL loss_fn keys)
    ("grpo", "grpo", {}, {}),
    ("dapo", "dapo", {}, {}),
    ("gspo", "gspo", {}, {}),
    ("gmpo", "gmpo", {}, {}),
    ("grpo, kl_gradient=k3", "grpo", {"kl_gradient": "k3"}, {"kl_gradient": "k3"}),
]


def measure(src: str) -> list[dict]:
    """The rows for one checkout (run in a child process with `src` first on sys.path)."""
    sys.path.insert(0, src)
    spec = importlib.util.spec_from_file_location(
        "loss_parity", HERE / "clipo_testkit" / "loss_parity.py"
    )
    lp_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lp_mod)
    rows = []
    for label, objective, fields, keys in CASES:
        lp, data = lp_mod.parity_batch()
        row = {"case": label}
        try:
            row["runner"], g_runner = lp_mod.runner_loss(objective, lp, data, **fields)
            row["nemo"], g_nemo, row["cls"] = lp_mod.driver_loss(objective, lp, data, **keys)
            row["grad"] = float((g_runner - g_nemo).abs().max())
        except TypeError as e:  # a setting this checkout does not have
            row["skip"] = f"not in this checkout ({e})"
        except Exception as e:  # noqa: BLE001 - e.g. NeMo-RL not importable
            row["skip"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", action="append", help="clipo_megatron checkout(s); default: this one")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    print("| code | case | NeMo-RL driver loss | runner loss | NeMo-RL loss | max abs grad diff |")
    print("|---|---|---|---:|---:|---:|")
    for src in args.src or [str(HERE)]:
        out = subprocess.run(
            [sys.executable, __file__, "--child", src], capture_output=True, text=True, check=True
        )
        for r in json.loads(out.stdout.strip().splitlines()[-1]):
            if "skip" in r:
                print(f"| {src} | {r['case']} | {r['skip']} | | | |")
            else:
                print(
                    f"| {src} | {r['case']} | {r['cls']} | {r['runner']:.8f} | {r['nemo']:.8f} "
                    f"| {r['grad']:.2e} |"
                )


if __name__ == "__main__":
    main()
