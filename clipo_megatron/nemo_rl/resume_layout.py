# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The parallel layout a checkpoint was saved with, and the resume Megatron-Bridge would refuse.

NeMo-RL resumes from the highest `step_N` under `checkpointing.checkpoint_dir` (its
`CheckpointManager.get_latest_checkpoint_path`, called whether or not `checkpointing.enabled`).
Megatron-Bridge saves the distributed optimizer's state `dp_reshardable` (NeMo-RL does not forward
`dist_ckpt_optim_fully_reshardable`), a format tied to the optimizer's buckets of each (TP, PP)
rank: Bridge's loader compares the checkpoint's (TP, PP) with the run's and, with the distributed
optimizer on and optimizer state to load, raises after the model is built. DP and CP may change
(the state is sharded over the DP x CP group and resharded on load); sequence parallel does not
change a parameter's shape. Bridge does not check the buckets, but Megatron-Core loads the state
only into buckets of the saved sizes (`load_parameter_state_from_dp_reshardable` asserts it), and
with `overlap_grad_reduce` a bucket holds max(40M, 1M x DP) elements (`DistributedDataParallel`):
a DP change across 40, or a change of `overlap_grad_reduce`, fails there.

With any optimizer, an MoE model's expert weights sit in an optimizer of their own only when they
use the expert groups (EP > 1 or expert TP != TP: Megatron-Core's `use_expert_pgs`,
tensor_parallel/layers.py), so a resume across that line finds other parameter groups in the saved
optimizer state and stops in `_filter_and_reorder_param_groups` ("Could not find parameter
group"). A dense model never sets EP > 1, so the rule reads only layouts where one side does.

`ClipoPolicy.save_checkpoint` writes `LAYOUT_FILE` beside NeMo-RL's checkpoint; checkpoints from
before it are read from the master config NeMo-RL writes beside them (`config.yaml`), else the
preflight warns that it cannot tell.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from clipo_megatron.file_format import VERSION_KEY, check_version, stamped
from clipo_megatron.nemo_rl.port.master_config import dotted_get

LAYOUT_FILE = "clipo_layout.json"
LAYOUT_FORMAT = 1  # {format_version, the LAYOUT_KEYS fields, dp, optimizer_saved}
NEMO_RL_CONFIG_FILE = "config.yaml"  # the master config NeMo-RL's init_tmp_checkpoint writes
MEGATRON = "policy.megatron_cfg."
# The recorded field -> the recipe key it comes from (one home for both directions).
LAYOUT_KEYS = {
    "tp": MEGATRON + "tensor_model_parallel_size",
    "pp": MEGATRON + "pipeline_model_parallel_size",
    "cp": MEGATRON + "context_parallel_size",
    "sequence_parallel": MEGATRON + "sequence_parallel",
    "use_distributed_optimizer": MEGATRON + "optimizer.use_distributed_optimizer",
    "overlap_grad_reduce": MEGATRON + "distributed_data_parallel_config.overlap_grad_reduce",
    "ep": MEGATRON + "expert_model_parallel_size",
    "etp": MEGATRON + "expert_tensor_parallel_size",  # unset: TP (Megatron-Core's default)
}
BOOLEAN = ("sequence_parallel", "use_distributed_optimizer", "overlap_grad_reduce")
REQUIRED = ("tp", "pp", "cp", "sequence_parallel", "use_distributed_optimizer")
# What Bridge cannot reshard a dp_reshardable distributed-optimizer state across.
NOT_RESHARDABLE = ("tp", "pp")


def layout_of(config: dict[str, Any], *, dp: int | None = None) -> dict[str, Any]:
    """The layout of a master config (`policy:` under its key) or of a bare policy config; DP
    from the master config's `cluster:` unless given."""
    cfg = config if "policy" in config else {"policy": config}
    layout: dict[str, Any] = {}
    for field, key in LAYOUT_KEYS.items():
        value = dotted_get(cfg, key, None, none_is_default=True)
        if field == "overlap_grad_reduce" and value is None:
            layout[field] = None  # not in the recipe (no NeMo-RL parent merged): unknown
        elif field == "etp" and value is None:
            layout[field] = layout["tp"]
        else:
            layout[field] = bool(value) if field in BOOLEAN else int(value or 1)
    nodes = dotted_get(cfg, "cluster.num_nodes")
    gpus = dotted_get(cfg, "cluster.gpus_per_node")
    if dp is None and nodes is not None and gpus is not None:
        dp = int(nodes) * int(gpus) // (layout["tp"] * layout["pp"] * layout["cp"])
    layout["dp"] = dp
    return layout


def grad_bucket_elements(layout: dict[str, Any]) -> int | None:
    """Megatron-Core's default DDP bucket size (NeMo-RL sets none); None: one bucket per buffer."""
    if not layout["overlap_grad_reduce"]:
        return None
    return max(40_000_000, 1_000_000 * int(layout["dp"]))


def save_layout(step_dir: str, layout: dict[str, Any], *, optimizer_saved: bool) -> None:
    """Write the layout beside NeMo-RL's checkpoint (whole or not at all: temp file + rename)."""
    os.makedirs(step_dir, exist_ok=True)
    tmp = os.path.join(step_dir, LAYOUT_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(stamped({**layout, "optimizer_saved": optimizer_saved}, LAYOUT_FORMAT), f)
    os.replace(tmp, os.path.join(step_dir, LAYOUT_FILE))


def recorded_layout(step_dir: Path) -> tuple[dict[str, Any], str] | None:
    """(layout + optimizer_saved, the file it came from), None when the checkpoint records none."""
    ours = step_dir / LAYOUT_FILE
    if ours.is_file():
        saved = json.loads(ours.read_text())
        if not isinstance(saved, dict):
            raise ValueError(f"{ours}: not a CLIPO layout record; delete it")
        check_version(
            saved, LAYOUT_FORMAT, ours, "delete it (the preflight then reads config.yaml)"
        )
        saved.pop(VERSION_KEY)
        if not all(f in saved for f in REQUIRED):
            raise ValueError(f"{ours}: not a CLIPO layout record; delete it")
        return saved, str(ours)
    theirs = step_dir / NEMO_RL_CONFIG_FILE
    if theirs.is_file():
        import yaml  # type: ignore[import-untyped]

        master = yaml.safe_load(theirs.read_text())
        if isinstance(master, dict) and isinstance(master.get("policy"), dict):
            saved = layout_of(master)
            saved["optimizer_saved"] = bool(
                dotted_get(master, "checkpointing.save_optimizer", True, none_is_default=True)
            )
            return saved, str(theirs)
    return None


def resume_step_dir(config: dict[str, Any]) -> Path | None:
    """The checkpoint NeMo-RL resumes from: the highest `step_N` (exactly that name) under
    `checkpointing.checkpoint_dir`, as `CheckpointManager.get_latest_checkpoint_path`."""
    root = dotted_get(config, "checkpointing.checkpoint_dir")
    if not root or not Path(root).is_dir():
        return None
    steps = [p for p in Path(root).iterdir() if re.fullmatch(r"step_\d+", p.name)]
    return max(steps, key=lambda p: int(p.name.split("_")[1]), default=None)


def check_resume_layout(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, warnings): a resume Bridge would refuse, one line naming the changed keys."""
    step_dir = resume_step_dir(config)
    if step_dir is None:
        return [], []
    now = layout_of(config)
    found = recorded_layout(step_dir)
    if found is None:
        if not now["use_distributed_optimizer"]:
            return [], []
        return [], [
            f"{step_dir} records no parallel layout (saved before {LAYOUT_FILE}): NeMo-RL resumes "
            "from it, and Megatron-Bridge refuses a resume at another TP / PP with "
            f"{LAYOUT_KEYS['use_distributed_optimizer']}=true only after the model loads; resume "
            "at the layout it was saved with"
        ]
    saved, source = found
    if not saved.get("optimizer_saved", True):
        return [], []  # no optimizer state to load: Bridge loads weights across layouts
    where = f"resuming {step_dir}, layout from {source}"
    problems = _expert_groups_problem(saved, now, where)
    if not now["use_distributed_optimizer"]:
        return problems, []
    changed = [
        f"{LAYOUT_KEYS[f]}: saved {saved[f]}, now {now[f]}"
        for f in NOT_RESHARDABLE
        if int(saved[f]) != now[f]
    ]
    if changed:
        problems.append(
            f"{'; '.join(changed)} ({where}): Megatron-Bridge "
            "cannot reshard the distributed optimizer's saved state (dp_reshardable) across TP / "
            f"PP; {CHOICES}"
        )
    known = (
        saved.get("overlap_grad_reduce"),
        now["overlap_grad_reduce"],
        saved.get("dp"),
        now["dp"],
    )
    if None not in known:
        was, bucket = grad_bucket_elements(saved), grad_bucket_elements(now)
        if was != bucket:
            problems.append(
                f"{LAYOUT_KEYS['overlap_grad_reduce']}={str(now['overlap_grad_reduce']).lower()} "
                f"at DP {now['dp']} (cluster.num_nodes x gpus_per_node / TP*PP*CP) gives gradient "
                f"buckets of {_elements(bucket)}, saved {_elements(was)} (overlap_grad_reduce="
                f"{str(saved['overlap_grad_reduce']).lower()}, DP {saved['dp']}; resuming "
                f"{step_dir}): Megatron-Core loads the distributed optimizer's state only into "
                f"buckets of the saved sizes; {CHOICES}"
            )
    return problems, []


def _expert_groups(layout: dict[str, Any]) -> bool:
    """Megatron-Core's `use_expert_pgs` for an expert layer of this layout."""
    return int(layout["ep"]) > 1 or int(layout["etp"]) != int(layout["tp"])


def _expert_groups_problem(saved: dict[str, Any], now: dict[str, Any], where: str) -> list[str]:
    """One line when the experts' optimizer groups differ (module docstring); a record from
    before EP was recorded, or EP 1 on both sides (a dense model), is not judged."""
    if "ep" not in saved or max(int(saved["ep"]), int(now["ep"])) == 1:
        return []
    if _expert_groups(saved) == _expert_groups(now):
        return []
    keys = [f for f in ("ep", "etp", "tp") if int(saved[f]) != int(now[f])]
    changed = "; ".join(f"{LAYOUT_KEYS[f]}: saved {saved[f]}, now {now[f]}" for f in keys)
    return [
        f"{changed} ({where}): the experts' optimizer state is kept apart only when they use "
        "Megatron-Core's expert groups (expert_model_parallel_size > 1 or expert_tensor_"
        "parallel_size != tensor_model_parallel_size), so the saved optimizer's parameter groups "
        f"do not match this layout's and the load stops; {CHOICES}"
    ]


CHOICES = (
    "resume at the saved layout, or export its weights (NeMo-RL's "
    "examples/converters/convert_megatron_to_hf.py) and start a new run from them "
    "(policy.model_name=<export>, another checkpointing.checkpoint_dir)"
)


def _elements(bucket: int | None) -> str:
    return "one per buffer" if bucket is None else f"{bucket // 1_000_000}M elements"
