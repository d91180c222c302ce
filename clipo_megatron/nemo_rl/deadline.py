# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A job's time limit turned into NeMo-RL's own save-and-stop: `checkpointing.checkpoint_must_save_by`.

`grpo_train` measures that budget from its own start and, with the iteration time it has
seen, saves at the end of the last step that would cross it (the same save block as
`save_period`, so the policy, the optimizer, the dataloader, CLIPO's head and the run state
are all written), then returns. A Slurm job's limit is an absolute time, so the batch script
exports `CLIPO_SAVE_BY` (epoch seconds: the job's end minus a margin for the save) and the
driver turns it into the budget at the moment `grpo_train` starts (setup's minutes already
spent). After `grpo_train` returns, `stopped_early` tells the driver whether the run ended at
the deadline short of its last step: it then exits `EXIT_REQUEUE` and the batch script
requeues the job, which resumes from that checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from clipo_megatron.nemo_rl.port.master_config import block

SAVE_BY_ENV = "CLIPO_SAVE_BY"
EXIT_REQUEUE = 75  # EX_TEMPFAIL: saved at the deadline, not finished; slurm/common.sh requeues
_KEY = "checkpoint_must_save_by"


def save_by_from_env(env: Mapping[str, str]) -> float | None:
    """The epoch second `CLIPO_SAVE_BY` names, or None when unset; ValueError (one line) if bad."""
    raw = env.get(SAVE_BY_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"{SAVE_BY_ENV}={raw!r}: must be the epoch second by which to save (date +%s); "
            "unset it to train without a deadline"
        )
    return value


def check_before_start(env: Mapping[str, str], config: dict[str, Any]) -> None:
    """The deadline's user errors, before any actor starts: ValueError (one line)."""
    if save_by_from_env(env) is not None and not config["checkpointing"].get("enabled", True):
        raise ValueError(
            f"{SAVE_BY_ENV} is set but checkpointing.enabled=false: the run would stop at the "
            "deadline without saving; enable checkpointing or unset it"
        )


def budget(seconds: float) -> str:
    """NeMo-RL's 'DD:HH:MM:SS' for a budget in seconds (floored; never negative)."""
    s = max(0, int(seconds))
    return f"{s // 86400:02d}:{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def _seconds(text: str) -> int:
    parts = [int(x) for x in str(text).split(":")]
    return sum(p * u for p, u in zip(reversed(parts), (1, 60, 3600, 86400)))


def apply_save_by(master_config: Any, save_by: float, now: float) -> str:
    """Set `checkpointing.checkpoint_must_save_by` to the time left until `save_by` (the
    recipe's own, when it is set and sooner, is kept); the value set. ValueError when
    checkpointing is off: NeMo-RL would stop at the deadline and save nothing."""
    ck = block(master_config, "checkpointing")
    if not ck.get("enabled", True):
        raise ValueError(
            f"{SAVE_BY_ENV} is set but checkpointing.enabled=false: the run would stop at the "
            "deadline without saving; enable checkpointing or unset it"
        )
    left = save_by - now
    own = ck.get(_KEY)
    if own is not None and _seconds(own) < left:
        return str(own)
    ck[_KEY] = budget(left)
    return ck[_KEY]


def planned_steps(master_config: Any, steps_per_epoch: int) -> int:
    """The step `grpo_train` ends at: max_num_steps or the epochs' worth, whichever is first."""
    grpo = master_config["grpo"] if isinstance(master_config, dict) else master_config.grpo

    def get(key: str) -> int:
        return int(grpo[key] if isinstance(grpo, dict) else getattr(grpo, key))

    return min(get("max_num_steps"), get("max_num_epochs") * steps_per_epoch)


def saved_step(checkpointer: Any) -> int:
    """The step of the latest checkpoint NeMo-RL would resume from (0: none)."""
    info = checkpointer.load_training_info(checkpointer.get_latest_checkpoint_path()) or {}
    return int(info.get("total_steps", info.get("step", 0)))


def stopped_at_deadline(
    save_by: float, *, started: float, now: float, steps: tuple[int, int], planned: int
) -> bool:
    """Did `grpo_train` return at the deadline, short of its last step? `steps`: (the saved
    step when it started, the saved step now). NeMo-RL stops at the deadline only once
    elapsed + its mean step time reaches the budget, so then `now` is within one mean step
    (at most (now - started) / steps run) of `save_by`; a run that ended otherwise short of
    its last step (a validation early stop) is not near it and is not requeued."""
    start, end = steps
    if end >= planned:
        return False
    mean_step = (now - started) / max(1, end - start)
    return now + mean_step >= save_by
