# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron eval --run DIR`: pass@1 on the held-out split of a training run's own task.

    clipo-megatron eval --run runs/train/cpu_demo [eval.n=8 eval.size=64 ...]
    clipo-megatron eval --config examples/configs/cpu_demo.yaml   # the base model, no checkpoint

Loads the run's config and its latest checkpoint (policy weights), samples
n answers per held-out problem at the eval temperature (0.6, top-p 0.95 by
default, the paper's) on the in-distribution set and on the perturbed one
(eval.perturbed_size), verifies them with math-verify and writes
eval.json / eval.md into the run directory (or --out). The paper's benchmark
suites are `clipo-megatron eval --suite ...` (`clipo_megatron.eval.run`). This command
belongs to the runner (its config, task and `Run`); `clipo_megatron/cli.py` routes
`eval --run / --config` here, so the eval package never imports the runner.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from omegaconf import OmegaConf

from clipo_megatron.cli_args import make_parser, user_error


def _score(res: dict, key: str) -> str:
    return f"{res[key]:.3f}" if key in res else "-"


PROG = "clipo-megatron eval"


def _resolve(args, load_config):
    """(config, checkpoint path or None, output dir): every input checked, nothing written.
    A missing folder, another run's checkpoint or a folder of someone else's files is refused."""
    import tempfile

    from clipo_megatron.output_folder import check_output_folder
    from clipo_megatron.runner.checkpoint import check_readable
    from clipo_megatron.runner.run_dir import FIXED, flatten

    if not args.run:
        cfg = load_config(args.config, args.overrides)
        out = Path(args.out or f"runs/eval/{Path(args.config).stem}-base")
        check_output_folder(out, kinds=("heldout",), key="--out")
        return cfg, None, out
    run_dir = Path(args.run)
    if not run_dir.is_dir():
        raise FileNotFoundError(
            f"--run {run_dir}: no such folder; pass a `clipo-megatron train` output dir"
        )
    if not (run_dir / "config.json").exists():
        arms = sorted(p.parent for p in run_dir.glob("*/*/seed*/config.json"))
        if arms:  # `compare`'s OUT: name its runs
            raise FileNotFoundError(
                f"{run_dir} is a `clipo-megatron compare` output, not one run: pass one of its "
                f"runs, e.g. --run {arms[0]} ({len(arms)} there)"
            )
        raise FileNotFoundError(
            f"{run_dir} has no config.json: is it a `clipo-megatron train` output dir?"
        )
    try:
        saved = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{run_dir / 'config.json'} is not JSON ({e})") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{run_dir / 'config.json'} is not a train run's config")
    with tempfile.TemporaryDirectory() as tmp:  # never written into the run's own folder
        cfg_path = Path(tmp) / "config.yaml"
        OmegaConf.save(OmegaConf.create(saved), cfg_path)
        cfg = load_config(str(cfg_path), args.overrides)
    ckpt = run_dir / "checkpoints" / "latest.pt"
    if not ckpt.exists():
        raise FileNotFoundError(f"no checkpoint at {ckpt}: train the run first")
    trained = check_readable(ckpt).get("config") or {}
    old, now = flatten(trained), flatten(saved)
    moved = sorted(k for k in old.keys() & now.keys() if k.startswith(FIXED) and old[k] != now[k])
    if moved:  # another model's checkpoint: its weights would not fit (27 lines, after the load)
        shown = ", ".join(
            f"{k} {old[k]!r} in the checkpoint, {now[k]!r} in config.json" for k in moved
        )
        raise ValueError(
            f"{ckpt} belongs to another model than {run_dir / 'config.json'} ({shown}): "
            "put the run's own checkpoint back, or pass the run it came from"
        )
    out = Path(args.out or run_dir)
    check_output_folder(out, kinds=("heldout", "train"), key="--out")
    return cfg, ckpt, out


def parser():
    ap = make_parser(PROG, __doc__)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--run", help="a training output directory (config.json + checkpoints/latest.pt)"
    )
    src.add_argument("--config", help="a YAML recipe: evaluate its base model")
    ap.add_argument(
        "--out",
        help="where to write eval.json / eval.md (default: the run dir; with --config "
        "runs/eval/<recipe>-base); a new, empty or clipo-megatron folder",
    )
    ap.add_argument("overrides", nargs="*", help="dotted overrides, e.g. eval.n=8")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    warnings.filterwarnings("ignore", module=r"megatron\..*")
    from clipo_megatron.output_folder import claim_output_folder
    from clipo_megatron.runner.checkpoint import load_checkpoint
    from clipo_megatron.runner.config import load_config
    from clipo_megatron.runner.evaluation import evaluate
    from clipo_megatron.runner.memory import check_memory
    from clipo_megatron.runner.run import Run

    try:  # every user error before any model loads, one line
        cfg, ckpt, out = _resolve(args, load_config)
        check_memory(cfg)
    except (ValueError, FileNotFoundError) as e:
        user_error(PROG, str(e))
    run = Run(cfg)
    step = 0
    if ckpt is not None:
        state = load_checkpoint(ckpt)  # weights only: checked by check_readable above
        run.model.load_state_dict(state["policy"])
        assert run.gen is not None  # a single process is rank 0: it holds the generator
        run.gen.sync_from_megatron(run.model.state_dict())
        step = state["step"]
    res = evaluate(run)
    res.update(
        {
            "checkpoint": str(ckpt) if ckpt else "base model",
            "step": step,
            "temperature": cfg.eval.temperature,
            "top_p": cfg.eval.top_p,
        }
    )
    claim_output_folder(out, kind="heldout", key="--out", also=("train",))
    (out / "eval.json").write_text(json.dumps(res, indent=2))
    md = [
        "| checkpoint | step | problems | n | T | pass@1 | perturbed problems | perturbed pass@1 |",
        "|---|---|---|---|---|---|---|---|",
        f"| {res['checkpoint']} | {step} | {res.get('problems', 0)} | {res['n']} | "
        f"{res['temperature']} | {_score(res, 'pass@1')} | {res.get('perturbed_problems', 0)} | "
        f"{_score(res, 'pass@1_perturbed')} |",
    ]
    (out / "eval.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    if "samples_per_s" in res:
        print(f"throughput: {res['samples_per_s']:.2f} samples/s")
    return 0
