# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""One run from its checkpoint to its outputs: resume (or score the base policy first), step with
the metrics log, TensorBoard and the progress bar, checkpoint every `output.checkpoint_every`
steps and where a stop signal (SIGTERM, Ctrl-C) ends the run, then score the trained policy and
write the results.

An error a rerun recovers from is raised as `RunFailed`, its message ending with what to do; the
CLI prints it as one line. Only rank 0 writes, prints and evaluates (it alone holds the generator).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path


class RunFailed(Exception):
    """The run stopped on an error the user can act on (the message says how)."""

    def __init__(self, message: str, *, shown: bool = True):
        super().__init__(message)
        self.shown = shown  # False on the ranks that leave the saying to rank 0


def run_header(cfg):
    """What the reports say about a run besides its numbers."""
    from clipo_megatron.reporting.results import RunHeader
    from clipo_megatron.runner.run import STAGES

    return RunHeader(
        objective=cfg.clipo.objective,
        clipo=cfg.clipo.enabled,
        dataset=cfg.data.dataset,
        model=cfg.model.source,
        eval_temperature=cfg.eval.temperature,
        stages=STAGES,
    )


def train_loop(run, cfg, stop, before: dict | None = None) -> int:
    """The exit status: 0 when trained and written, the signal's code when stopped by one."""
    from clipo_megatron.runner.checkpoint import checkpoint_path
    from clipo_megatron.runner.evaluation import evaluate
    from clipo_megatron.runner.parallel import is_rank0

    out, ckpt = Path(cfg.output.dir), checkpoint_path(cfg.output.dir)
    rank0 = is_rank0()
    results = _start(run, cfg, out, ckpt, rank0, before)
    saved_at = _steps(run, cfg, stop, out, ckpt, rank0)
    if run.step_idx < cfg.train.steps:
        if rank0:
            kept = "checkpoint written there" if saved_at == run.step_idx else "step abandoned"
            print(
                f"stopped at step {run.step_idx} ({kept}); rerun the same command to resume "
                f"from step {saved_at}",
                file=sys.stderr,
            )
        return stop.exit_code
    if not rank0:
        return 0
    final = evaluate(run) if _evaluates(cfg) else {}
    try:
        _write_outputs(cfg, run, out, results, final)
    except OSError as e:  # a full disk after the last step: training is saved, the outputs are not
        (out / "results.json.tmp").unlink(missing_ok=True)
        raise RunFailed(
            f"cannot write the run's outputs in {out}: {e.strerror or e}; training "
            f"is checkpointed at step {saved_at}: free space and rerun the same command to write them"
        ) from None
    print((out / "results.md").read_text())
    return 0


def _evaluates(cfg) -> bool:
    return cfg.eval.size > 0 or cfg.perturbed_eval_size() > 0


def _start(run, cfg, out: Path, ckpt: Path, rank0: bool, before: dict | None) -> dict:
    """Resume from the checkpoint, or score the base policy; the "before" results."""
    from clipo_megatron.runner.checkpoint import load_checkpoint
    from clipo_megatron.runner.evaluation import evaluate

    results: dict = {}
    if ckpt.exists():
        run.load_state_dict(load_checkpoint(ckpt))
        if (out / "eval_before.json").exists():
            results = json.loads((out / "eval_before.json").read_text())
        if rank0:
            print(f"[clipo-megatron] resumed from {ckpt} at step {run.step_idx}")
    elif cfg.eval.before_training and _evaluates(cfg) and rank0:
        results = before if before is not None else evaluate(run)
        try:
            (out / "eval_before.json").write_text(json.dumps(results, indent=2))
        except OSError as e:  # a full disk before step 0: nothing trained yet, nothing lost
            (out / "eval_before.json").unlink(missing_ok=True)
            raise RunFailed(
                f"cannot write {out / 'eval_before.json'}: {e.strerror or e}; "
                "free space and rerun the same command"
            ) from None
        print(f"[clipo-megatron] before training: {_scores(results)}")
    return results


def _steps(run, cfg, stop, out: Path, ckpt: Path, rank0: bool) -> int:
    """Step to `train.steps` (or a stop signal); the step the last checkpoint holds."""
    from tqdm import tqdm

    from clipo_megatron.reporting.metrics_log import MetricsLog, MetricsLogError, trim_metrics_log
    from clipo_megatron.runner import nonfinite
    from clipo_megatron.runner.checkpoint import CheckpointNotWritten, save_checkpoint
    from clipo_megatron.runner.parallel import broadcast_from_rank0

    saved_at = run.step_idx  # a rerun resumes here
    if rank0:
        trim_metrics_log(out / "metrics.jsonl", run.step_idx)
    writer = _tensorboard(cfg, out, run.step_idx) if rank0 else None
    bar = tqdm(
        total=cfg.train.steps,
        initial=run.step_idx,
        desc=run_header(cfg).label,
        dynamic_ncols=True,
        disable=not rank0,
    )
    log = MetricsLog(out / "metrics.jsonl") if rank0 else None  # strict JSON, unbuffered
    try:
        while run.step_idx < cfg.train.steps:
            if broadcast_from_rank0(stop.signum) is not None:
                # every rank stops before the same step (rank 0's signal decides) and saves there:
                # a Slurm time limit or preemption loses no finished step
                if saved_at != run.step_idx:
                    save_checkpoint(run, ckpt)
                    saved_at = run.step_idx
                break
            m = run.step()
            nonfinite.count(run.history)  # m is the history's last entry
            _record(m, log, writer, bar)
            nonfinite.check(run.history, cfg.train.max_nonfinite_skips, saved_at)
            if run.step_idx % cfg.output.checkpoint_every == 0 or run.step_idx == cfg.train.steps:
                save_checkpoint(run, ckpt)
                saved_at = run.step_idx
    except KeyboardInterrupt:  # a second signal: abandon the step (or the write: the old file kept)
        stop.signum = stop.signum or signal.SIGINT
    except MetricsLogError as e:  # a full disk: said below the bar, with where a rerun resumes
        raise RunFailed(
            f"{e} at step {run.step_idx - 1}; free space and rerun the same command to resume "
            f"from step {saved_at}"
        ) from None
    except nonfinite.NonFiniteStop as e:  # K updates skipped in a row: a knob poisons every step
        raise RunFailed(str(e), shown=rank0) from None
    except CheckpointNotWritten as e:  # non-finite weights or a full disk; the old one is kept
        hint = "free space and rerun" if e.full_disk else "rerun"
        raise RunFailed(
            f"{e}; {hint} the same command to resume from step {saved_at}", shown=rank0
        ) from None
    finally:  # before the error line: the bar's line ends first
        bar.close()
        if log:
            log.close()
        if writer:
            writer.close()
    return saved_at


def _record(m: dict, log, writer, bar) -> None:
    """One step's metrics into metrics.jsonl, TensorBoard (numbers only) and the progress bar."""
    if log:
        log.write(m)
    if writer:
        for k, v in m.items():
            if k != "step" and not isinstance(v, str):  # rollout/token_hash: jsonl only
                writer.add_scalar(k, v, m["step"])
    bar.set_postfix(_shown(m))
    bar.update(1)


def _tensorboard(cfg, out: Path, step: int):
    if not cfg.output.tensorboard:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tensorboard"), purge_step=step)


def _shown(m: dict) -> dict[str, str]:
    """The progress bar's numbers: the reward, and CLIPO's when the run has a head."""
    shown = {"reward": m["reward/mean"]}
    if "clipo/loss" in m:  # the baseline has no head: nothing of CLIPO's to show
        shown.update(cl_loss=m["clipo/loss"], valid=m["clipo/valid_group_frac"])
        shown["share"] = m.get("clipo/adv_share", 0.0)
    return {k: f"{v:.2f}" for k, v in shown.items()}


def _write_outputs(cfg, run, out: Path, results: dict, final: dict) -> None:
    """Plots, results.md, then results.json (last: it marks a finished run)."""
    from clipo_megatron.reporting import results as report

    head = run_header(cfg)
    if cfg.output.plots:
        from clipo_megatron.reporting.plots import plot_curves, plot_tsne

        plot_curves(run.history, out / "curves.png", title=head.label)
        if run.embeddings:
            plot_tsne(run.embeddings, out / "tsne.png")
        else:  # the baseline arm (CLIPO off) builds no head
            print("[clipo-megatron] no tsne.png: this run has no head embeddings (CLIPO off)")
    report.write_results(out, head, run.history, results, final)


def _scores(res: dict) -> str:
    """e.g. "pass@1 0.688, perturbed pass@1 0.250 (6.1 samples/s)"."""
    parts = [f"{name} {res[k]:.3f}" for k, name in _SCORES if k in res]
    rate = f" ({res['samples_per_s']:.1f} samples/s)" if "samples_per_s" in res else ""
    return ", ".join(parts) + rate


_SCORES = (("pass@1", "pass@1"), ("pass@1_perturbed", "perturbed pass@1"))
