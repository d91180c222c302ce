# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Driver-side policy: NeMo-RL's `Policy` with the CLIPO worker extension (via `setup(policy_factory=...)`).

`make_clipo_policy_class(cfg, state)` returns NeMo-RL's `Policy` under `ClipoPolicyMixin`, which
- builds its workers from `ClipoMegatronPolicyWorker` (`worker_extension_cls_fqn`)
  and registers that class for the mcore venv (`ACTOR_ENVIRONMENT_REGISTRY`);
- `get_logprobs`: attaches `clipo_sample_idx = arange(B)` to a *copy* of the
  data (so `get_reference_policy_logprobs`, which grpo_train calls with the
  same dict, pools nothing); NeMo-RL's sharding / sorting / `reorder_data`
  handle the extra column like any other;
- `train`: a no-op during CLIPO warm-up (rollouts, logprobs and head updates
  still run, the policy is not updated; paper App. "critic warmup");
- `save_checkpoint`: also writes the head under `<step dir>/clipo_head/` and the parallel
  layout (`resume_layout.LAYOUT_FILE`); on construction with `weights_path` (resume) the head
  and step are restored.

The head step is not the policy's: the driver hands the estimator a `head_step.WorkersHeadStep`
over this policy's worker group. The worker methods called through Ray are named by the
constants `worker.py` derives from them (`CLIPO_SETUP`, ...). The NeMo-RL-free pieces
(`warmup_train_result`, the run-state file) are tested on CPU.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import torch

from clipo_megatron.file_format import check_version, stamped
from clipo_megatron.nemo_rl.advantage_estimator import ClipoRunState
from clipo_megatron.nemo_rl.config import ClipoNemoRLConfig
from clipo_megatron.nemo_rl.port.grpo_loop import actor_python_env, batched_data, policy_class
from clipo_megatron.nemo_rl.resume_layout import layout_of, save_layout
from clipo_megatron.nemo_rl.worker import (
    CLIPO_EXPECT_ROWS,
    CLIPO_LOAD_HEAD,
    CLIPO_SAVE_HEAD,
    CLIPO_SETUP,
    SAMPLE_IDX_KEY,
    FinalNormNotFound,
)

WORKER_FQN = "clipo_megatron.nemo_rl.worker_extension.ClipoMegatronPolicyWorker"


def worker_refusal(error: BaseException) -> FinalNormNotFound | None:
    """A worker's refusal at `clipo_setup`, as the one line the worker wrote: Ray hands the driver
    a `RayTaskError` (an instance of the cause's class too) whose text is the remote traceback."""
    cause = getattr(error, "cause", error)
    if isinstance(cause, FinalNormNotFound):
        return FinalNormNotFound(str(cause))
    return None


def step_dir_of(weights_path: str) -> str:
    """grpo_train saves weights to <step dir>/policy/weights."""
    return os.path.dirname(os.path.dirname(os.path.normpath(weights_path)))


RUN_STATE_FILE = "clipo_run_state.json"  # the baseline's step counter (the head's files hold it
# when CLIPO is on)
RUN_STATE_FORMAT = 1  # {format_version, step}
_RUN_STATE_FIX = "delete it or resume from another step"


def save_run_state(step_dir: str, state: dict[str, int]) -> None:
    """Write {"step": n} beside NeMo-RL's checkpoint (whole or not at all: temp file + rename)."""
    os.makedirs(step_dir, exist_ok=True)
    tmp = os.path.join(step_dir, RUN_STATE_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(stamped(state, RUN_STATE_FORMAT), f)
    os.replace(tmp, os.path.join(step_dir, RUN_STATE_FILE))


def load_run_state(step_dir: str) -> dict[str, int] | None:
    """The saved {"step": n}, None when the checkpoint has none (saved with CLIPO on: the head's
    file holds it); a malformed file, or one of another format version, is one error naming it."""
    path = os.path.join(step_dir, RUN_STATE_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a CLIPO run state ({e}); {_RUN_STATE_FIX}") from None
    check_version(state, RUN_STATE_FORMAT, path, _RUN_STATE_FIX)
    step = state.get("step")
    if type(step) is not int or step < 0:
        raise ValueError(
            f"{path}: not a CLIPO run state (step {step!r} is not a count); {_RUN_STATE_FIX}"
        )
    return {"step": step}


def resume_without_optimizer(weights_path: Any, optimizer_path: Any) -> str | None:
    """The line to print when NeMo-RL resumes the policy's weights but hands it no optimizer state
    (Adam restarts; the CLIPO head resumes with its own): NeMo-RL only `warnings.warn`s it, and
    a release may do it on every resume with a newer Megatron-Core than its pin (port/versions/)."""
    if not weights_path or optimizer_path:
        return None
    return (
        f"[clipo] WARNING: resuming the policy from {weights_path} without its optimizer state "
        "(NeMo-RL's get_resume_paths found none): Adam restarts from zero. A NeMo-RL release may "
        "do this on every resume with a Megatron-Core newer than its pin (torch_dist checkpoints "
        "without common.pt; docs/nemo_rl.md lists the versions); a later main reads both layouts."
    )


def warmup_train_result(data, loss_fn) -> dict[str, Any]:
    """What `Policy.train` returns while the policy is held (warm-up): no update, the same metrics.

    grpo_train reads the metrics a real update reports (`global_valid_toks`, `global_valid_seqs`,
    `token_mult_prob_error`, `gen_kl_error`, ...). They are measured, not invented: the loss
    function is evaluated once on the whole batch at the rollout policy (`prev_logprobs` as the
    current logprobs, ratio 1, no forward, no gradient), with the same global counts NeMo-RL's
    worker computes (`process_global_batch`). Loss and grad norm are 0: nothing is updated.
    """
    token_mask = data["token_mask"][:, 1:].float()  # [B, S-1]
    sample_mask = data["sample_mask"].float()  # [B]
    global_valid_seqs = sample_mask.sum()
    global_valid_toks = (token_mask * sample_mask.unsqueeze(-1)).sum()
    with torch.no_grad():
        _, metrics = loss_fn(
            next_token_logprobs=data["prev_logprobs"][:, 1:].float(),
            data=data,
            global_valid_seqs=global_valid_seqs,
            global_valid_toks=global_valid_toks,
        )
    metrics = {k: [v] for k, v in metrics.items()}
    metrics.update(
        loss=[0.0],
        global_valid_seqs=[float(global_valid_seqs)],
        global_valid_toks=[float(global_valid_toks)],
        clipo_warmup=[1.0],
    )
    return {"loss": torch.zeros(1), "grad_norm": torch.zeros(1), "all_mb_metrics": metrics}


if TYPE_CHECKING:  # what `super()` reaches: NeMo-RL's Policy, imported lazily at run time
    from clipo_megatron.nemo_rl.port.grpo_loop import PolicyBase as _PolicyBase
else:
    _PolicyBase = object


class ClipoPolicyMixin(_PolicyBase):
    """CLIPO's part of the driver's policy, over NeMo-RL's `Policy` (`make_clipo_policy_class`;
    `super()` reaches `Policy`). Used with CLIPO on and off, so the baseline runs the same
    worker code path with the CLIPO methods idle. Set by `make_clipo_policy_class`:"""

    clipo_cfg: ClipoNemoRLConfig
    clipo_state: ClipoRunState

    def __init__(self, *args: Any, **kwargs: Any):
        # NeMo-RL's own argument picks the worker class; CLIPO's extension unless one is given
        register_worker_env(kwargs.setdefault("worker_extension_cls_fqn", WORKER_FQN))
        super().__init__(*args, **kwargs)
        cfg, state = self.clipo_cfg, self.clipo_state
        weights_path = kwargs.get("weights_path")
        lost = resume_without_optimizer(weights_path, kwargs.get("optimizer_path"))
        if lost:
            print(lost, file=sys.stderr)
        if not cfg.head_runs:  # the baseline: no head built, loaded or saved; the step counter
            # (the verifier metrics' step) is restored, or a resumed run logs them at step 1
            saved = load_run_state(step_dir_of(str(weights_path))) if weights_path else None
            if saved:
                state.load_state_dict(saved)
            return
        # NeMo-RL's worker group takes keyword arguments only (worker_groups.py, "Please use
        # kwargs instead"): every worker call below names its arguments.
        try:  # before the first rollout: a model CLIPO cannot capture stops here, in one line
            self.run_all_workers_single_data(CLIPO_SETUP, clipo_cfg=cfg.to_dict())
        except Exception as e:
            refusal = worker_refusal(e)
            if refusal is None:
                raise
            raise refusal from None
        if weights_path:
            extras = self.run_all_workers_single_data(
                CLIPO_LOAD_HEAD, step_dir=step_dir_of(str(weights_path))
            )
            saved = next((e for e in extras if e), None)
            if saved:
                state.load_state_dict(saved)

    def get_logprobs(self, data: Any, timer: Any = None) -> Any:
        if not self.clipo_cfg.head_runs:
            return super().get_logprobs(data, timer=timer)
        tagged = batched_data(dict(data))
        tagged[SAMPLE_IDX_KEY] = torch.arange(data.size)
        return super().get_logprobs(tagged, timer=timer)

    def train(self, data: Any, loss_fn: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.clipo_cfg.policy_updates_at(self.clipo_state.trained_step):
            return warmup_train_result(data, loss_fn)
        return super().train(data, loss_fn, *args, **kwargs)

    def save_checkpoint(self, weights_path: str, *args: Any, **kwargs: Any) -> None:
        super().save_checkpoint(weights_path, *args, **kwargs)
        step_dir = step_dir_of(weights_path)
        policy_cfg = getattr(self, "cfg", None)  # NeMo-RL's Policy keeps its config here
        if isinstance(policy_cfg, dict):  # read by a later resume's preflight (resume_layout)
            optimizer_path = kwargs.get("optimizer_path", args[0] if args else None)
            save_layout(
                step_dir,
                layout_of(policy_cfg, dp=getattr(self, "data_parallel_size", None)),
                optimizer_saved=optimizer_path is not None,
            )
        if self.clipo_cfg.head_runs:
            self.run_all_workers_single_data(
                CLIPO_SAVE_HEAD, step_dir=step_dir, extra=self.clipo_state.state_dict()
            )
        else:
            save_run_state(step_dir, self.clipo_state.state_dict())


class ClipoTQPolicyMixin(ClipoPolicyMixin):
    """CLIPO over NeMo-RL's `TQPolicy` (the TransferQueue loop, `grpo_train_sync`;
    `port/transfer_queue.py`): the rows stay in TransferQueue, so the logprob pass is announced to the
    workers by sample id and the warm-up holds `train_from_meta`. Set by
    `make_clipo_policy_class`: `clipo_dp_cfg`, the recipe's `data_plane` block."""

    clipo_dp_cfg: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("dp_cfg", self.clipo_dp_cfg)  # as run_grpo.py's factory passes it
        super().__init__(*args, **kwargs)

    def get_logprobs_from_meta(self, meta: Any, *args: Any, **kwargs: Any) -> Any:
        if self.clipo_cfg.head_runs:  # row i of compute_advantage is meta.sample_ids[i]
            self.run_all_workers_single_data(CLIPO_EXPECT_ROWS, sample_ids=list(meta.sample_ids))
        return super().get_logprobs_from_meta(meta, *args, **kwargs)

    def train_from_meta(self, meta: Any, loss_fn: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.clipo_cfg.policy_updates_at(self.clipo_state.trained_step):
            fields = kwargs.get("train_fields") or TRAIN_FIELDS_READ
            data = self.read_from_dataplane(  # the columns the loss reads; the tokens stay
                meta, select_fields=[f for f in fields if f != "input_ids"]
            )
            return warmup_train_result(data, loss_fn)
        return super().train_from_meta(meta, loss_fn, *args, **kwargs)


# What the warm-up reads when grpo_train_sync names no train_fields (NeMo-RL's DP_TRAIN_FIELDS
# less the tokens).
TRAIN_FIELDS_READ = (
    "input_lengths", "generation_logprobs", "prev_logprobs", "reference_policy_logprobs",
    "advantages", "token_mask", "sample_mask",
)  # fmt: skip


def register_worker_env(worker_fqn: str) -> None:
    """CLIPO's worker gets the stock Megatron worker's prefetched venv (worker_env.py); another
    worker class (a subclass of it, passed as `worker_extension_cls_fqn`) must have one already."""
    if worker_fqn == WORKER_FQN:
        from clipo_megatron.nemo_rl.worker_env import register_clipo_worker_env

        print(f"[clipo] {register_clipo_worker_env(WORKER_FQN)}")
    elif actor_python_env(worker_fqn) is None:
        raise ValueError(
            f"worker class {worker_fqn} has no Python environment in NeMo-RL's "
            "ACTOR_ENVIRONMENT_REGISTRY; register it before building the policy"
        )


def make_clipo_policy_class(
    cfg: ClipoNemoRLConfig, state: ClipoRunState, *, data_plane: dict[str, Any] | None = None
) -> type:
    """NeMo-RL's `Policy` under `ClipoPolicyMixin` for this run (`setup(policy_factory=)`); with
    `data_plane` (an enabled `data_plane:` block) its `TQPolicy` under `ClipoTQPolicyMixin`, as
    NeMo-RL's run_grpo.py builds a TQPolicy for such a recipe."""
    from clipo_megatron.nemo_rl import require_nemo_rl

    require_nemo_rl()
    if data_plane:
        from clipo_megatron.nemo_rl.port.transfer_queue import tq_policy_class

        return tq_policy_class(
            ClipoTQPolicyMixin, clipo_cfg=cfg, clipo_state=state, clipo_dp_cfg=dict(data_plane)
        )
    return policy_class(ClipoPolicyMixin, clipo_cfg=cfg, clipo_state=state)
