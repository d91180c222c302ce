# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Run CLIPO GRPO with NeMo-RL (Megatron backend).

    uv run python examples/run_grpo_clipo.py --config examples/configs/track2_qwen7b.yaml \
        cluster.num_nodes=4 grpo.max_num_steps=500 clipo.method.temperature=0.02

Dotted overrides as NeMo-RL's examples take them (`+key=value` adds a key).
`--validate-only` runs the preflight (clipo_megatron.nemo_rl.guard.preflight: recipe; when NeMo-RL is
importable its version, the seams the extension uses in its source (one line per moved seam;
clipo_megatron.nemo_rl.port.seams) and its MasterConfig; data files and columns, train/validation
overlap, parallel sizes against the model, cluster environment) and prints one `preflight OK` line (the resolved config
with `--verbose`, or into `--print-config FILE`); every problem is one line on stderr and the exit
code is 2. `--no-cluster-env` skips the environment checks (laptop,
CI). A real run goes through the same preflight before Ray starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "track1_qwen3b.yaml"

OVERRIDES_HELP = """\
overrides (any number, before or after the options, as NeMo-RL's examples/run_grpo.py
takes them; a recipe's keys are NeMo-RL's MasterConfig plus its `clipo:` block):
  key.path=value    set a key the recipe already has (OmegaConf dotted path; a key the recipe
                    lacks is refused, naming it, so a typo never passes silently)
  +key.path=value   add a key the recipe does not have

examples:
  python examples/run_grpo_clipo.py --config examples/configs/track1_qwen3b.yaml \\
      clipo.enabled=true policy.megatron_cfg.tensor_model_parallel_size=2
  python examples/run_grpo_clipo.py --config examples/configs/track2_qwen7b.yaml \\
      grpo.max_num_steps=500 clipo.method.temperature=0.02 --validate-only --no-cluster-env
"""


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        usage="%(prog)s [--config YAML] [options] [key.path=value ...]",
        description=__doc__.splitlines()[0],
        epilog=OVERRIDES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="YAML",
        help="the recipe: NeMo-RL's YAML format, whose `defaults:` names parent recipes (a path "
        "beside it, nemo_rl:examples/configs/... from $NEMO_RL_ROOT, clipo_megatron:clipo.yaml); "
        "default: examples/configs/track1_qwen3b.yaml (Qwen2.5-3B-Instruct on GSM8K)",
    )
    p.add_argument(
        "--validate-only",
        action="store_true",
        help="run the preflight, print one OK line, then exit (2 on problems)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="with --validate-only: print the resolved config"
    )
    p.add_argument(
        "--seams",
        action="store_true",
        help="with --validate-only: list the NeMo-RL names CLIPO rebinds for the recipe's loop "
        "and the seams in NeMo-RL's source it relies on",
    )
    p.add_argument(
        "--print-config",
        type=Path,
        metavar="FILE",
        help="with --validate-only: write the resolved config (JSON) to FILE",
    )
    p.add_argument(
        "--no-cluster-env",
        action="store_true",
        help="skip the cluster environment checks (TORCH_CUDA_ARCH_LIST, NeMo-RL, HF_HOME, ...)",
    )
    return p.parse_known_args(argv)


def ok_line(
    recipe: Path,
    warnings: int,
    written: Path | None,
    prompt_filter: str | None = None,
    not_run: list[str] | None = None,
    skipped: str | None = None,
) -> str:
    """The one line a passing preflight prints (the config itself only on request), with the
    over-long prompts the run drops when `clipo.drop_overlong_prompts` is on, the model families
    and features CLIPO has not run with (accepted is not "has run"), and NeMo-RL's own checks
    when they could not run here."""
    where = (
        f"written to {written}" if written else "--verbose prints it, --print-config FILE saves it"
    )
    noted = f" with {warnings} warning(s) above" if warnings else ""
    dropped = f"; {prompt_filter}" if prompt_filter else ""
    untested = f" (accepted; CLIPO has not run with {'; '.join(not_run)})" if not_run else ""
    unchecked = f"; {skipped}" if skipped else ""
    return f"preflight OK{untested}: {recipe}{noted}{dropped}; resolved config {where}{unchecked}"


def main(argv: list[str] | None = None) -> int:
    from clipo_megatron.nemo_rl.deadline import check_before_start
    from clipo_megatron.nemo_rl.guard.preflight import preflight

    args, overrides = parse_args(argv)
    bad = [o for o in overrides if o.startswith("-")]
    if bad:
        print(f"unknown options {bad}; overrides are key.path=value", file=sys.stderr)
        return 2
    report = preflight(args.config, overrides, cluster_env=not args.no_cluster_env)
    if report.warnings or report.problems:
        print(report.format(args.config), file=sys.stderr)
    if not report.ok:
        return 2
    config, clipo = report.config, report.clipo
    assert config is not None and clipo is not None
    try:  # the job's deadline (slurm/common.sh exports it): checked in the preflight step too
        check_before_start(os.environ, config)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.validate_only:
        resolved = json.dumps({"clipo": clipo.to_dict(), "config": config}, indent=1, default=str)
        if args.print_config:
            try:
                args.print_config.write_text(resolved + "\n")
            except OSError as e:
                print(f"--print-config {args.print_config}: {e.strerror}", file=sys.stderr)
                return 2
        if args.verbose:
            print(resolved)
        if args.seams:
            from clipo_megatron.nemo_rl.port.loops import loop_of
            from clipo_megatron.nemo_rl.port.seams import seam_list

            print("\n".join(seam_list(loop_of(config))))
        print(
            ok_line(
                args.config,
                len(report.warnings),
                args.print_config,
                report.prompt_filter,
                report.not_run,
                report.skipped,
            )
        )
        return 0
    from clipo_megatron.megatron.pooling.final_norm import FinalNormNotFound
    from clipo_megatron.nemo_rl.driver import run

    try:
        run(config)
    except FinalNormNotFound as e:  # the workers' refusal at clipo_setup, before any rollout
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
