# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Run CLIPO GRPO with NeMo-RL (Megatron backend).

    uv run python examples/run_grpo_clipo.py --config examples/configs/track2_qwen7b.yaml \
        cluster.num_nodes=4 grpo.max_num_steps=500 clipo.method.temperature=0.02

Dotted overrides as NeMo-RL's examples take them (`+key=value` adds a key).
`--validate-only` loads, resolves and validates the recipe and prints it
(no NeMo-RL needed; CI and the sbatch dry run use it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "track1_qwen3b.yaml"


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="recipe YAML (with `defaults:` chain)"
    )
    p.add_argument(
        "--validate-only", action="store_true", help="load + validate + print the config, then exit"
    )
    return p.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    from clipo_megatron.nemo_rl.config import load_recipe, validate_master_config

    args, overrides = parse_args(argv)
    bad = [o for o in overrides if o.startswith("-")]
    if bad:
        raise SystemExit(f"unknown options {bad}; overrides are key.path=value")
    config = load_recipe(args.config, overrides)
    clipo = validate_master_config(config)
    if args.validate_only:
        print(json.dumps({"clipo": clipo.to_dict(), "config": config}, indent=1, default=str))
        return 0
    from clipo_megatron.nemo_rl.driver import run

    run(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
