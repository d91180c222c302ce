# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A run directory belongs to one run and one config.

- `RunLock`: an advisory lock (`fcntl.flock`) on `output.dir/run.lock`, held for the run's
  life. The OS drops it when the process ends however it ends (kill -9 included), so a dead
  run never blocks its rerun; a second live run on the same directory is refused, naming
  the holder's pid (two runs would interleave their metrics and overwrite each other's
  checkpoint).
- `config_changes`: where the run's config differs from the one its checkpoint was trained
  with. A resume that changes what the checkpoint means (the method, model, objective, data,
  seed, optimiser: the optimiser state would silently keep its old lr) is refused in one
  line listing the keys, unless the user says `--allow-config-change`; budget and execution
  keys (`RESUMABLE`) may change.
- `record_config`: `config.json` (the config in force) and `config_history.jsonl` (every
  config the directory has seen, with the step it started at), written only after the
  checks, so a refused run leaves both as they were.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
from pathlib import Path

LOCK_NAME = "run.lock"
HISTORY_NAME = "config_history.jsonl"

# Keys a resume may change: how long to train, where / how often to write, how to execute
# (threads, the model-parallel layout, the generator backend, micro-batching, prefix packing:
# the same update in another layout). A prefix ending in "." covers its whole block.
RESUMABLE = (
    "train.steps",
    "threads",
    "output.",
    "parallel.",
    "rollout.backend",
    "rollout.verify_timeout",
    "train.micro_batch",
    "train.shared_prefix",
    "train.max_nonfinite_skips",
    "data.max_row_chars",
    "data.max_file_mb",
)
ALLOW_FLAG = "--allow-config-change"
# Keys no resume may change, the flag or not: they set the weights' shapes.
FIXED = "model."


class RunLock:
    """`output.dir/run.lock`, flock'ed for the life of the run; the file holds the holder's pid."""

    def __init__(self, output_dir: str | Path):
        self.dir = Path(output_dir)
        self.path = self.dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock or raise ValueError naming the pid of the run that holds it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        # O_CLOEXEC: a process this one execs (the verifier's forkserver) does not keep the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ValueError(
                f"output.dir={self.dir} is in use by another run (pid {holder}): wait for it "
                "to finish or stop it, or choose another output.dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # no pid left behind for a lock nobody holds
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire() if self._fd is None else self

    def __exit__(self, *exc) -> None:
        self.release()


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    """{"a": {"b": 1}} -> {"a.b": 1}; JSON-normalised (tuples as lists), as config.json holds it."""
    out: dict[str, object] = {}
    for k, v in json.loads(json.dumps(d)).items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def resumable(key: str) -> bool:
    return any(key == r or (r.endswith(".") and key.startswith(r)) for r in RESUMABLE)


def config_changes(saved: dict, now: dict) -> list[str]:
    """The keys (dotted, sorted) set in both configs whose values differ and that a resume may
    not change. A key only one side has (a config schema of another version) is not compared."""
    a, b = flatten(saved), flatten(now)
    return sorted(k for k in a.keys() & b.keys() if a[k] != b[k] and not resumable(k))


def saved_config(ckpt: Path) -> tuple[dict | None, int]:
    """(the config the checkpoint was trained with, its step), read without loading its tensors
    (memory-mapped): cheap, before any model loads."""
    from clipo_megatron.core.safe_load import load_state  # the one checkpoint loader

    state = load_state(ckpt, mmap=True)
    return state.get("config"), int(state.get("step", 0))


def check_resume(out: Path, now: dict, *, allow_change: bool) -> tuple[list[str], int]:
    """(the refused keys a resume changes, the step it resumes at); ValueError when it changes
    one without `allow_change`. Compared with the checkpoint's own config (the weights' truth),
    else with config.json."""
    from clipo_megatron.runner.checkpoint import checkpoint_path

    ckpt = checkpoint_path(out)
    if not ckpt.exists():
        return [], 0  # nothing trained here yet: any config starts afresh
    saved, step = saved_config(ckpt)
    if saved is None and (out / "config.json").exists():  # a checkpoint older than its config
        saved = json.loads((out / "config.json").read_text())
    if saved is None:
        return [], step
    keys = config_changes(saved, now)
    old, new = flatten(saved), flatten(now)
    shapes = [k for k in keys if k.startswith(FIXED)]
    if shapes:  # the flag cannot help: the weights would not fit the new model
        shown = ", ".join(f"{k} ({old[k]!r} -> {new[k]!r})" for k in shapes)
        raise ValueError(
            f"output.dir={out} holds a checkpoint (step {step}) of another model: {shown}; "
            f"a model cannot change on resume, even with {ALLOW_FLAG} (the weights have the "
            "old shapes): rerun with the saved values or choose another output.dir"
        )
    if keys and not allow_change:
        shown = ", ".join(f"{k} ({old[k]!r} -> {new[k]!r})" for k in keys[:8])
        more = f" and {len(keys) - 8} more" if len(keys) > 8 else ""
        raise ValueError(
            f"output.dir={out} holds a checkpoint (step {step}) trained with another config: "
            f"{shown}{more}; rerun with the saved values, choose another output.dir, or pass "
            f"{ALLOW_FLAG} to resume with the new ones"
        )
    return keys, step


def record_config(out: Path, now: dict, *, step: int, changed: list[str]) -> None:
    """config.json (the config now in force) and one line of config_history.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    entry = {
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "step": step,
        "pid": os.getpid(),
        "changed": changed,
        "config": now,
    }
    with (out / HISTORY_NAME).open("a") as f:
        f.write(json.dumps(entry, allow_nan=False) + "\n")
    tmp = out / "config.json.tmp"
    tmp.write_text(json.dumps(now, indent=2, allow_nan=False))
    tmp.replace(out / "config.json")


def claim(cfg, *, allow_config_change: bool = False, rank0: bool = True) -> RunLock | None:
    """Before any model loads: lock output.dir (rank 0), check a resume's config, trim the
    metrics log to the resumed step, then write config.json and the history. The lock (None
    off rank 0) is the caller's to release."""
    from clipo_megatron.output_folder import check_output_folder, claim_output_folder
    from clipo_megatron.runner.config import to_dict

    out, now = Path(cfg.output.dir), to_dict(cfg)
    lock = None
    try:
        if rank0:  # never into a folder of someone else's files; a held lock: nothing written
            check_output_folder(out, kinds=("train",), key="output.dir")
        lock = RunLock(out).acquire() if rank0 else None
        if rank0:
            claim_output_folder(out, kind="train", key="output.dir")
        changed, step = check_resume(out, now, allow_change=allow_config_change)
        if rank0:
            from clipo_megatron.reporting.metrics_log import trim_metrics_log

            # The steps the rerun redoes (and a torn last line) leave metrics.jsonl here, so
            # a broken log is named before the model loads, not after.
            trim_metrics_log(out / "metrics.jsonl", step)
            record_config(out, now, step=step, changed=changed)
    except OSError as e:  # a full disk, a read-only mount: one line, not a traceback
        if lock is not None:
            lock.release()
        where = e.filename or out
        raise ValueError(
            f"output.dir={out}: cannot write {where} ({e.strerror or e}): free space or "
            "choose another output.dir"
        ) from None
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return lock
