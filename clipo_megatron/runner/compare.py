# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron compare`: every objective x {CLIPO, baseline} x seeds, one table.

    clipo-megatron compare --config examples/configs/cpu_demo.yaml \\
        --objectives grpo,dapo,gspo,gmpo --seeds 0,1,2 --out runs/compare [key=value ...]

Each run is a `clipo-megatron train` run of its own, in OUT/<objective>/<clipo|baseline>/seed<k>
(CLIPO: clipo.enabled=true; baseline: the same objective with clipo.enabled=false; the seed is
`seed=k`), trained one after another, each in a fresh process (`run_isolated`). Resumable per run: a run with a
results.json is done and skipped, an unfinished one resumes from its checkpoint (rerun the same
command after a stop). The two arms of a seed start from the same base policy, so its held-out
scores before training are measured once per seed and shared.

Writes OUT/compare.md and OUT/compare.json (per objective and arm: mean and 95 % t-interval over
seeds of train reward, held-out and perturbed pass@1 before / after, step time; the paired
CLIPO-minus-baseline difference per objective and a verdict in plain words),
OUT/curves_clipo_vs_<objective>.png (curves overlaid, mean over seeds) and
OUT/paired_differences.png. Objectives default to every one in the registry
(core/objectives.py); seeds to 0. Dotted overrides apply to every run; seed, clipo.enabled,
clipo.objective and output.dir are set per run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from clipo_megatron.cli_args import make_parser, user_error

if TYPE_CHECKING:
    from clipo_megatron.runner.config import RunConfig

PROG = "clipo-megatron compare"
OWNED_KEYS = {
    "seed": "--seeds",
    "clipo.enabled": "the two arms",
    "clipo.objective": "--objectives",
    "output.dir": "--out",
}


def _parse(argv):
    ap = make_parser(PROG, __doc__)
    ap.add_argument("--config", help="YAML recipe (e.g. examples/configs/cpu_demo.yaml)")
    ap.add_argument("--objectives", help="comma-separated (default: every registered objective)")
    ap.add_argument("--seeds", default="0", help="comma-separated non-negative ints (default 0)")
    ap.add_argument("--out", default="runs/compare", help="output directory (default runs/compare)")
    ap.add_argument("overrides", nargs="*", help="OmegaConf dotted overrides for every run")
    return ap.parse_intermixed_args(argv)


def parse_objectives(text: str | None) -> list[str]:
    from clipo_megatron.core.objectives import OBJECTIVES

    if text is None:
        return list(OBJECTIVES)
    names = [x.strip() for x in text.split(",")]
    for n in names:
        if n not in OBJECTIVES:
            raise ValueError(
                f"--objectives: {n!r} is not one of {', '.join(OBJECTIVES)} (comma-separated)"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"--objectives {text}: an objective is named twice")
    return names


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(
            f"--seeds {text}: must be comma-separated non-negative integers, e.g. 0,1,2"
        ) from None
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text}: seeds must be non-negative and distinct")
    return seeds


def _check_overrides(overrides: list[str]) -> None:
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key in OWNED_KEYS:
            raise ValueError(f"{o}: compare sets {key} for each run; use {OWNED_KEYS[key]}")


def _config_drift(run: Path, cfg_dict: dict) -> str | None:
    """The first key where an earlier run in `run` was configured differently, or None."""
    f = run / "config.json"
    if not f.exists():
        return None
    old, new = json.loads(f.read_text()), json.loads(json.dumps(cfg_dict))

    def walk(a, b, prefix=""):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                found = walk(a.get(k), b.get(k), f"{prefix}{k}.")
                if found:
                    return found
            return None
        return None if a == b else f"{prefix[:-1]}: {a!r} then, {b!r} now"

    return walk(old, new)


Plan = list[tuple[str, str, int, "RunConfig"]]


def _plan(args) -> Plan:
    """Every run's (objective, arm, seed, RunConfig), validated; user errors raise ValueError."""
    from clipo_megatron.runner import preflight

    objectives, seeds = parse_objectives(args.objectives), parse_seeds(args.seeds)
    _check_overrides(args.overrides)
    paths = preflight.input_paths(args.config, args.overrides)
    try:
        preflight.check_inputs({**paths, "output.dir": args.out}, output_kind="compare")
    except ValueError as e:
        raise ValueError(str(e).replace("output.dir", "--out")) from None
    from clipo_megatron.output_folder import check_output_folder, claim_output_folder
    from clipo_megatron.reporting.compare_report import ARMS, run_dir
    from clipo_megatron.runner.config import load_config, to_dict
    from clipo_megatron.runner.memory import check_memory

    plan: Plan = []
    for obj in objectives:
        for arm in ARMS:
            for seed in seeds:
                d = run_dir(Path(args.out), obj, arm, seed)
                own = [
                    f"seed={seed}",
                    f"clipo.enabled={arm == 'clipo'}",
                    f"clipo.objective={obj}",
                    f"output.dir={d}",
                ]
                cfg = load_config(args.config, [*args.overrides, *own])
                preflight.check_launch(cfg)
                if not plan:  # every run reads the same data and has the same sizes
                    check_memory(cfg)
                    preflight.check_data(cfg)
                check_output_folder(d, kinds=("train",), key="output.dir")
                drift = _config_drift(d, to_dict(cfg))
                if drift:
                    raise ValueError(
                        f"{d} holds a run with another config ({drift}); "
                        "use another --out or delete that run"
                    )
                if not (d / "results.json").exists():  # it will run (resuming, if it can)
                    preflight.check_checkpoint(d)
                plan.append((obj, arm, seed, cfg))
    try:  # last (nothing is written for a refused command); root passes os.access checks
        claim_output_folder(args.out, kind="compare", key="--out")
    except OSError as e:
        raise ValueError(f"--out {args.out}: cannot create it ({e.strerror})") from None
    return plan


def _eval_key(cfg: RunConfig) -> str:
    """What the base policy's held-out scores depend on (not the arm, not the objective)."""
    from clipo_megatron.runner.config import to_dict

    c = to_dict(cfg)
    return json.dumps([c["seed"], c["model"], c["data"], c["eval"], c["rollout"]["backend"]])


def _shared_before(plan: Plan, cfg: RunConfig) -> dict | None:
    """The held-out scores before training of another run with the same seed and eval setup."""
    for _, _, _, other in plan:
        f = Path(other.output.dir) / "eval_before.json"
        if other is not cfg and f.exists() and _eval_key(other) == _eval_key(cfg):
            return json.loads(f.read_text())
    return None


def _child(cfg: RunConfig, before: dict | None) -> None:
    from clipo_megatron.runner.lifetime import die_with_parent
    from clipo_megatron.runner.train import train_one

    die_with_parent()  # a killed compare leaves no arm training on (SIGTERM: stop after the step)
    try:
        rc = train_one(cfg, before=before)
    except KeyboardInterrupt:  # between steps' signal handling, e.g. during the evaluation
        rc = 130
    sys.exit(rc)


def run_isolated(cfg: RunConfig, before: dict | None) -> int:
    """One run in a fresh (spawned) process; its exit status.

    Runs one after another in one process do not give their memory back (the in-process vLLM
    engine and the policy outlive `close()` in part): measured, 9 demo runs grew to 17 GB of
    RSS and the kernel killed the 10th. A child's memory is returned when it exits, at the
    price of its imports (~10 s). Ctrl-C reaches the child too (same process group): it stops
    after its step, as `train` does, and this waits for it.
    """
    import multiprocessing

    proc = multiprocessing.get_context("spawn").Process(target=_child, args=(cfg, before))
    proc.start()
    while True:
        try:
            proc.join()
            break
        except KeyboardInterrupt:
            continue  # the child got the signal as well and is stopping
    code = proc.exitcode if proc.exitcode is not None else 1
    return code if code >= 0 else 128 - code  # killed by signal k: 128 + k, as a shell says


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:  # user errors: one line, exit 2, before any model load
        plan = _plan(args)
    except (ValueError, FileNotFoundError) as e:
        user_error(PROG, str(e))
    from clipo_megatron.reporting.compare_report import write_report

    for i, (obj, arm, seed, cfg) in enumerate(plan, 1):
        d = Path(cfg.output.dir)
        tag = f"[compare] ({i}/{len(plan)}) {obj} / {arm} / seed {seed}"
        if (d / "results.json").exists():
            print(f"{tag}: finished earlier ({d / 'results.json'}), skipped")
            continue
        print(f"{tag} -> {d}", flush=True)
        rc = run_isolated(cfg, _shared_before(plan, cfg))
        if rc != 0:
            print(f"{PROG}: stopped in {d}; rerun the same command to resume", file=sys.stderr)
            return rc
    objectives = list(dict.fromkeys(p[0] for p in plan))
    seeds = list(dict.fromkeys(p[2] for p in plan))
    first = plan[0][3]
    title = f"CLIPO beside its baseline: {first.data.dataset} ({first.model.source}), "
    title += f"{first.train.steps} steps"
    write_report(Path(args.out), objectives, seeds, title, plots=first.output.plots)
    print((Path(args.out) / "compare.md").read_text())
    return 0
