# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron eval`: the paper's benchmark suites on a checkpoint, and run comparisons.

    clipo-megatron eval --suite track1 --model DIR --data-dir DATA --out runs/eval/mine
    clipo-megatron eval --datasets gsm8k,mmlu --model smollm2 --data-dir DATA --limit 20 --max-tokens 256
    clipo-megatron eval --datasets gsm_symbolic --source gsm_symbolic=gym --limit 50 --model smollm2
    clipo-megatron eval compare runs/eval/base runs/eval/mine [--names base,mine] --out runs/eval/cmp
    clipo-megatron eval paper table1/GRPO+CLIPO runs/eval/seed1 runs/eval/seed2 --out runs/eval/p1
    clipo-megatron eval --run runs/cpu_demo/grpo/clipo/seed0   # one run's held-out task (a train output dir)
    clipo-megatron eval --config examples/configs/cpu_demo.yaml  # the recipe's base model, same task

--model: `smollm2`, an HF model directory, or a `clipo-megatron train` output dir (Megatron checkpoint).
--backend: auto (vLLM when installed, else HF transformers), hf, vllm.
Suite defaults are the paper's (temperature 0.6, top-p 0.95; Track I n=1 and 2048 tokens, Track II
n=16 and 4096 tokens; `track1_greedy`: Track I greedy, as the authors' scripts); flags override them.
Every sampling knob (top-k, min-p, repetition penalty too) is pinned and recorded with the scores.
--grader paper grades as the authors' checker. Datasets come from --data-dir (the authors' parquet
layout, or $CLIPO_DATA_DIR), or per dataset from --source NAME=PATH|hf|hf:repo[:config][@split]|gym.
Writes OUT/results.json, results.md, scores.png and samples/<dataset>.jsonl (one line per sample:
prompt, response, extracted answer, verdict). Re-running the same command resumes.
--run / --config evaluate a training run's own held-out task instead (runner/heldout.py; see
`clipo-megatron eval --run DIR --help`): --run takes a `train` output dir, e.g. one arm of
`compare`'s OUT/<objective>/<clipo|baseline>/seed<k>, not `compare`'s OUT itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from clipo_megatron.cli_args import make_parser, user_error
from clipo_megatron.eval import inputs
from clipo_megatron.eval.compare_runs import run_compare
from clipo_megatron.eval.suites import SUITES, get_suite, suite_for
from clipo_megatron.generation import BACKENDS

PROG = "clipo-megatron eval"


def _parser() -> argparse.ArgumentParser:
    ap = make_parser(PROG, __doc__)
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--suite", help=" | ".join(SUITES))
    what.add_argument("--datasets", help="comma-separated dataset names (e.g. gsm8k,mmlu)")
    what.add_argument(
        "--run",
        metavar="DIR",
        help="a `clipo-megatron train` output dir (config.json + checkpoints/latest.pt): "
        "pass@1 on its own held-out task, [overrides ...] after it",
    )
    what.add_argument(
        "--config", metavar="YAML", help="a runner recipe: its base model on its held-out task"
    )
    ap.add_argument("--model", help="smollm2 | HF model dir | clipo-megatron train output dir")
    ap.add_argument("--backend", default="auto", choices=BACKENDS)
    ap.add_argument(
        "--data-dir",
        help="dir in the authors' layout (test/gsm8k.parquet, ...); default $CLIPO_DATA_DIR",
    )
    ap.add_argument(
        "--source", action="append", default=[], help="NAME=PATH|hf|hf:repo[:config][@split]|gym"
    )
    ap.add_argument(
        "--limit", type=int, help="questions per dataset: a fixed seeded subset (default: all)"
    )
    ap.add_argument("--subset-seed", type=int, default=0)
    ap.add_argument(
        "--n", type=int, help="samples per question (suite default: 1 Track I, 16 Track II)"
    )
    ap.add_argument("--temperature", type=float, help="0: greedy (suite track1_greedy)")
    ap.add_argument("--top-p", type=float)
    ap.add_argument("--top-k", type=int, help="default 0 (off); never the model's")
    ap.add_argument("--min-p", type=float, help="default 0 (off); never the model's")
    ap.add_argument("--repetition-penalty", type=float, help="default 1 (off); never the model's")
    ap.add_argument(
        "--grader",
        default="math_verify",
        choices=("math_verify", "paper"),
        help="math_verify (recommended) or paper (the authors' checker, docs/reproduce.md)",
    )
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--chunk",
        type=int,
        default=16,
        help="questions per generate call (memory / resume granularity)",
    )
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--verify-workers", type=int, default=2)
    ap.add_argument("--verify-timeout", type=float, default=10.0, help="seconds per answer")
    ap.add_argument("--out", help="output dir (default runs/eval/<model>-<suite>)")
    ap.add_argument("--no-progress", action="store_true")
    return ap


def _settings(args, datasets: list[str]):
    from clipo_megatron.eval.engine import EvalSettings

    suite = get_suite(args.suite) if args.suite else suite_for(datasets)
    d: dict[str, Any] = {"n": 1, "max_tokens": 2048, "temperature": 0.6, "top_p": 0.95}
    if suite is not None:
        d = {
            "n": suite.n,
            "max_tokens": suite.max_tokens,
            "temperature": suite.temperature,
            "top_p": suite.top_p,
        }
    for key, val in (
        ("n", args.n),
        ("max_tokens", args.max_tokens),
        ("temperature", args.temperature),
        ("top_p", args.top_p),
        ("top_k", args.top_k),
        ("min_p", args.min_p),
        ("repetition_penalty", args.repetition_penalty),
    ):
        if val is not None:
            d[key] = val
    from clipo_megatron.generation.sampling import Sampling

    Sampling(  # one line naming a bad knob, before any model loads
        d["temperature"],
        d["top_p"],
        d.get("top_k", 0),
        d.get("min_p", 0.0),
        d.get("repetition_penalty", 1.0),
    )
    if d["n"] < 1 or d["max_tokens"] < 1:
        raise ValueError(f"n={d['n']} and max_tokens={d['max_tokens']} must be >= 1")
    return EvalSettings(
        seed=args.seed,
        chunk=args.chunk,
        limit=args.limit,
        subset_seed=args.subset_seed,
        model=args.model,
        grader=args.grader,
        **d,
    )


def _prepare(args) -> tuple[list[str], dict[str, str], Any, dict, Path]:
    """(datasets, sources, settings, records, out): every input checked, nothing written and
    no model loaded; a bad one raises ValueError / FileNotFoundError (one line)."""
    from clipo_megatron.data.loader import load_dataset
    from clipo_megatron.data.registry import canonical_name

    inputs.check_numbers(args)
    inputs.check_model(args.model)
    names = (
        list(get_suite(args.suite).datasets)
        if args.suite
        else [canonical_name(x.strip()) for x in args.datasets.split(",") if x.strip()]
    )
    if not names:
        raise ValueError(f"--datasets {args.datasets!r}: name at least one dataset (e.g. gsm8k)")
    sources = inputs.parse_sources(args.source)
    settings = _settings(args, names)
    tag = args.suite or "-".join(names)
    out = Path(args.out or f"runs/eval/{Path(args.model).name}-{tag}")
    inputs.check_output(out)
    inputs.check_resume(out, settings)
    # Load every dataset first: a missing one fails now, with how to get it, not after an hour of generation.
    data = {
        n: load_dataset(
            n,
            sources.get(n),
            data_dir=args.data_dir,
            limit=args.limit,
            subset_seed=args.subset_seed,
            gen_seed=args.seed,
        )
        for n in names
    }
    return names, sources, settings, data, out


def run_suite(args) -> int:
    try:  # every user error before any model loads and before --out is touched: one line
        names, sources, settings, data, out = _prepare(args)
    except (ValueError, FileNotFoundError) as e:
        user_error(PROG, str(e))
    inputs.write_resume_key(out, settings)
    gen, load_s = _load_generator(args, settings)
    res = _evaluate_all(args, gen, data, settings, out)
    res.update(
        {
            "model": args.model,
            "suite": args.suite,
            "datasets_source": {n: sources.get(n, args.data_dir) for n in names},
        }
    )
    res["throughput"]["model_load_s"] = load_s
    _write_report(args, res, settings, out)
    return 0


def _load_generator(args, settings) -> tuple[Any, float]:
    """The generator, and the seconds it took to load."""
    from clipo_megatron.eval.generator import build_generator

    t0 = time.perf_counter()
    gen = build_generator(
        args.model,
        args.backend,
        seed=args.seed,
        threads=args.threads,
        max_model_len=settings.max_tokens + 2048,
    )
    return gen, time.perf_counter() - t0


def _evaluate_all(args, gen, data: dict, settings, out: Path) -> dict:
    """Every dataset generated and graded (what is on disk is skipped); the engine's results."""
    from clipo_megatron.eval.engine import evaluate
    from clipo_megatron.verify.pool import VerifierPool

    with VerifierPool(args.verify_workers, timeout=args.verify_timeout) as pool:
        return evaluate(gen, data, settings, out, pool=pool, progress=not args.no_progress)


def _report_lines(args, res: dict, settings, row: dict) -> list[str]:
    """results.md: the scores table, the per-dataset counters, the settings and throughput."""
    from clipo_megatron.eval.report import markdown_table

    table = markdown_table(
        {"columns": list(row), "scores": {args.model: row}, "deltas": {}, "baseline": args.model}
    )
    lines = [
        table,
        "| dataset | questions | samples | correct | no \\boxed answer | timeouts |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {n} | {d['questions']} | {d['samples']} | {d['correct']} | {d['no_answer']} | {d['timeouts']} |"
        for n, d in res["datasets"].items()
    ]
    tp = res["throughput"]
    lines.append(
        f"\nn={settings.n}, T={settings.temperature}, top-p={settings.top_p}, top-k={settings.top_k}"
        f", min-p={settings.min_p}, repetition_penalty={settings.repetition_penalty}"
        f", grader={settings.grader}, max_tokens={settings.max_tokens}"
        f", seed={settings.seed}, limit={settings.limit}; {tp['new_samples']} new samples in "
        f"{tp['seconds']:.1f} s ({tp['samples_per_s']:.2f} samples/s), model load "
        f"{tp['model_load_s']:.1f} s"
    )
    return lines


def _write_report(args, res: dict, settings, out: Path) -> None:
    """OUT/results.json, results.md and scores.png, and the same summary on stdout."""
    from clipo_megatron.eval.report import bar_chart

    (out / "results.json").write_text(json.dumps(res, indent=2))
    row = {**res["scores"], **res["averages"]}
    lines = _report_lines(args, res, settings, row)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    bar_chart({args.model: row}, out / "scores.png")
    print("\n".join(lines))
    tp = res["throughput"]
    print(
        f"throughput: {tp['samples_per_s']:.2f} samples/s ({tp['new_samples']} new samples in {tp['seconds']:.1f} s: "
        f"generate {tp['generate_s']:.1f} s, verify {tp['verify_s']:.1f} s)"
    )
    print(f"wrote {out}/results.json, results.md, scores.png, samples/")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "compare":
        return run_compare(argv[1:])
    if argv and argv[0] == "paper":
        from clipo_megatron.eval.paper_row import run_paper

        return run_paper(argv[1:])
    args = _parser().parse_args(argv)  # argparse's own errors: one line, exit 2
    if args.run or args.config:  # `clipo-megatron eval --run/--config` goes to runner/heldout.py
        print(
            "clipo-megatron eval: --run / --config are handled by `clipo-megatron eval` itself "
            "(python -m clipo_megatron.cli eval ...), not by this module",
            file=sys.stderr,
        )
        return 2
    if args.suite is None and args.datasets is None:
        _parser().print_help()
        print(
            f"\n{PROG}: error: pass --suite {'|'.join(SUITES)} or --datasets a,b", file=sys.stderr
        )
        return 2
    return run_suite(args)
