# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The NeMo-RL contract suite: NeMo-RL's real `grpo_train` on CPU, per objective, CLIPO on and off.

Each case runs 3 GRPO steps of the objective's track-1 recipe (NeMo-RL's
parent recipe merged) through the project's driver seams: warm-up step 1
(head only), a checkpoint at step 2, and a second run that resumes from that
checkpoint in fresh Ray actors and must give step 3 exactly as the
uninterrupted run did — rewards, losses, the contrastive metrics, the head,
its optimizer and the CLIPO step included. See nemo_rl_loop.py for which
pieces are NeMo-RL's own.

Run with `NEMO_RL_SRC=<NeMo-RL checkout> bash scripts/test_nemo_rl.sh`.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from clipo_testkit.nemo_rl.cpu_session import (  # noqa: F401 (SHARED, REAL_WORKER_FQN: other cases')
    REAL_WORKER_FQN,
    SHARED,
    contract_model_dir,
    ray_session,
    requirements,
)
from clipo_testkit.nemo_rl.nemo_rl_loop import train_metrics as _train_metrics

pytestmark = [pytest.mark.nemo_rl, pytest.mark.slow]
FULL = pytest.mark.contract_full  # outside CI's set: scripts/test_nemo_rl.sh runs it

STEPS, CHECKPOINT_STEP, WARMUP = 3, 2, 1


@pytest.fixture(scope="module")
def nemo_rl_cpu(tmp_path_factory):
    """Ray on this machine with NeMo-RL's own Megatron worker and the CLIPO extension registered
    (`cpu_session.ray_session`)."""
    missing = requirements()
    if missing:
        pytest.skip(missing)
    with ray_session(tmp_path_factory.mktemp("megatron_ckpt")) as worker_fqn:
        yield worker_fqn


@pytest.fixture(scope="module")
def contract_model(tmp_path_factory):
    return contract_model_dir()


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _first_difference(full: dict, resumed: dict) -> str | None:
    """The first per-row value of a step, in the order the step makes them, that a resume did not
    repeat exactly (the rollouts, the pooled states, r_CL, the advantages): names where a resume
    drifts, where the step's metrics only say that it did."""
    import torch

    for key in ("input_ids", "input_lengths", "rewards", "pooled", "r_cl", "advantages"):
        if key not in full and key not in resumed:
            continue
        a, b = full.get(key), resumed.get(key)
        if a is None or b is None or a.shape != b.shape or not torch.equal(a, b):
            diff = None if a is None or b is None or a.shape != b.shape else (a - b).abs().max()
            return f"{key} (max abs difference {diff})"
    return None


def _check_clipo(full, cfg, model_dir, pooled_tol: float = 1e-4) -> None:
    """CLIPO changes what NeMo-RL trains on, from the right rows and the right tokens (clipo_checks)."""
    from tests.nemo_rl import clipo_checks as cc

    trace = full["trace"]
    assert len(trace) == STEPS and all("advantages" in e and "r_cl" in e for e in trace)
    cc.check_pooled_states(trace[0], model_dir, pooled_tol)  # step 1 ran the initial weights
    errs, spreads = [], []
    for step, entry in enumerate(trace, 1):
        cc.check_r_cl_rows(entry, cfg["clipo"]["method"])
        errs.append(cc.check_advantages(entry, cfg))
        spreads.append(cc.within_group_spread(entry))
        logged = _train_metrics(full, step)["clipo/r_cl_spread"]
        assert (logged > 0) == (spreads[-1] > 0), (step, logged, spreads[-1])
    # correct rollouts of a group got different r_CL: r + r_CL is not two-valued, CLIPO matters
    assert max(spreads) > 0, f"r_CL never differed among a group's correct rollouts: {spreads}"
    cc.check_head_moved(full["head_at_start"], full["head"])
    print(
        f"\n[contract] r_CL within-group spread per step {[round(x, 5) for x in spreads]}; "
        f"advantages == GRPO(r + r_CL), max error per step {errs}"
    )


def _print_table(objective, clipo_on, flavour, full, resumed):
    keys = (
        "reward",
        "loss",
        "clipo/loss",
        "clipo/valid_group_frac",
        "clipo/reward_mean",
        "clipo/r_cl_spread",
        "clipo/adv_share",
        "clipo/ranked_frac",
    )
    print(
        f"\n[contract] NeMo-RL {flavour.name} ({flavour.version}) {objective} clipo={clipo_on}, "
        f"{full['packed_streams']} packed logprob microbatches"
    )
    for step in range(1, STEPS + 1):
        m = _train_metrics(full, step)
        print("  step", step, {k: round(m[k], 5) for k in keys if k in m})
    m = _train_metrics(resumed, STEPS)
    print("  resumed step", STEPS, {k: round(m[k], 5) for k in keys if k in m})


OBJECTIVES = ("grpo", "dapo", "gspo", "gmpo")
CASES = [(o, c) for o in OBJECTIVES for c in (True, False)]


def _case_id(objective: str, clipo_on: bool) -> str:
    return f"{objective}-{'clipo' if clipo_on else 'baseline'}"


# CI's set (scripts/test.sh) runs GRPO with CLIPO on and off, DAPO (dynamic sampling) and GMPO (our
# own loss function) with CLIPO; the other four (the DAPO / GSPO / GMPO baselines and GSPO with
# CLIPO: NeMo-RL's ClippedPGLossFn, as GRPO's, with other flags, which test_against_nemo_rl.py checks
# loss by loss) are `contract_full`, for CI's time budget (CONTRIBUTING.md). Its exact resume is GRPO
# with CLIPO in Track II's layout (test_contract_layouts.py), the same checks at TP 2 + SP with the
# distributed optimizer. The eight resumes here are `contract_full` (scripts/test_nemo_rl.sh).
IN_CI = {("grpo", True), ("grpo", False), ("dapo", True), ("gmpo", True)}
RUNS = [
    pytest.param(o, c, id=_case_id(o, c), marks=[] if (o, c) in IN_CI else [FULL]) for o, c in CASES
]
RESUMES = [pytest.param(o, c, id=_case_id(o, c), marks=[FULL]) for o, c in CASES]


def _config(contract_model, out: Path, objective: str, clipo_on: bool) -> dict:
    from clipo_testkit.nemo_rl.nemo_rl_loop import contract_config

    return contract_config(
        objective,
        clipo_on,
        model_dir=contract_model,
        out_dir=out,
        max_steps=STEPS,
        warmup_steps=WARMUP,
    )


@pytest.fixture(scope="module")
def full_runs(nemo_rl_cpu, contract_model, tmp_path_factory):
    """(objective, clipo_on) -> (run directory, the uninterrupted 3-step run): made once, read by
    the case's checks and by its resume (which runs it itself when run alone)."""
    from clipo_testkit.nemo_rl.nemo_rl_loop import run_grpo

    runs: dict[tuple[str, bool], tuple[Path, dict]] = {}

    def get(objective: str, clipo_on: bool) -> tuple[Path, dict]:
        if (objective, clipo_on) not in runs:
            root = tmp_path_factory.mktemp(_case_id(objective, clipo_on))
            cfg = _config(contract_model, root / "full", objective, clipo_on)
            runs[objective, clipo_on] = (root, run_grpo(cfg, worker_fqn=nemo_rl_cpu))
        return runs[objective, clipo_on]

    return get


@pytest.mark.parametrize(("objective", "clipo_on"), RUNS)
def test_grpo_train(full_runs, contract_model, objective, clipo_on):
    """NeMo-RL's grpo_train, 3 steps: every step trained and logged; with CLIPO, the head-only
    warm-up, the pooled states, r_CL on the right rows and GRPO(r + r_CL) advantages."""
    root, full = full_runs(objective, clipo_on)
    assert full["resumed_from"] is None
    # the recipes' sequence packing ran: NeMo-RL's packed streams reached the CPU model
    assert full["packed_streams"] > 2 * STEPS, full["packed_streams"]
    for step in range(1, STEPS + 1):  # grpo_train ran every step and logged its train metrics
        m = _train_metrics(full, step)
        assert {"reward", "loss", "global_valid_toks", "token_mult_prob_error"} <= set(m), step
        assert m["global_valid_toks"] > 0
    if clipo_on:
        assert full["clipo_step"] == STEPS
        # exactly `warmup_steps` head-only steps (grpo_train's steps 1..WARMUP), no policy loss
        held = [_train_metrics(full, s)["clipo/policy_updated"] == 0.0 for s in range(1, STEPS + 1)]
        assert held == [True] * WARMUP + [False] * (STEPS - WARMUP)
        assert all(_train_metrics(full, s)["loss"] == 0.0 for s in range(1, WARMUP + 1))
        assert any(_train_metrics(full, s)["clipo/valid_group_frac"] > 0 for s in (1, 2, 3))
        _check_clipo(
            full, _config(contract_model, root / "full", objective, clipo_on), contract_model
        )
    else:
        assert not any(k.startswith("clipo/") for k in _train_metrics(full, 1))


@pytest.mark.parametrize(("objective", "clipo_on"), RESUMES)
def test_grpo_train_resume(full_runs, nemo_rl_cpu, contract_model, objective, clipo_on):
    """Resume from the step-2 checkpoint in a fresh run directory and fresh Ray actors: step 3
    exactly as the uninterrupted run gave it (rows, rewards, losses, the head and its AdamW)."""
    from clipo_testkit.nemo_rl.nemo_rl_loop import run_grpo

    root, full = full_runs(objective, clipo_on)
    ckpt = root / "resumed" / "ckpt"
    shutil.copytree(root / "full" / "ckpt" / f"step_{CHECKPOINT_STEP}", ckpt / "step_2")
    cfg = _config(contract_model, root / "resumed", objective, clipo_on)
    resumed = run_grpo(cfg, worker_fqn=nemo_rl_cpu)
    check_exact_resume(full, resumed, clipo_on)
    _print_table(objective, clipo_on, full["flavour"], full, resumed)


def layout_config(model_dir: Path, out: Path, layout) -> dict:
    """The contract's GRPO + CLIPO run (`STEPS`, `WARMUP`) for a family case at `layout`
    (`real_worker.layouts.Layout`): its DP and world size."""
    from clipo_testkit.nemo_rl.nemo_rl_loop import contract_config

    return contract_config(
        "grpo",
        True,
        model_dir=model_dir,
        out_dir=out,
        max_steps=STEPS,
        warmup_steps=WARMUP,
        dp=layout.dp,
        world=layout.world,
    )


def check_exact_resume(full: dict, resumed: dict, clipo_on: bool, label: str = "") -> None:
    """The resumed run's step STEPS is the uninterrupted run's: with CLIPO the per-row trace, the
    head, its AdamW, RNG and step; always every metric grpo_train logged."""
    assert resumed["resumed_from"] == f"step_{CHECKPOINT_STEP}"
    if clipo_on:  # the baseline records no per-row trace
        stage = _first_difference(full["trace"][STEPS - 1], resumed["trace"][-1])
        assert stage is None, f"{label}resumed step {STEPS} first differs at {stage}"
    a, b = _train_metrics(full, STEPS), _train_metrics(resumed, STEPS)
    assert set(a) == set(b), f"only one run logged {sorted(set(a) ^ set(b))} at step {STEPS}"
    differ = {k: (a[k], b[k]) for k in a if not _same(a[k], b[k]) and not k.startswith("timing")}
    assert not differ, f"{label}resumed step {STEPS} differs: {differ}"
    if clipo_on:
        assert resumed["clipo_step"] == STEPS
        import torch

        for x, y in zip(full["head"], resumed["head"]):  # head, AdamW state, RNG, steps
            torch.testing.assert_close(x, y, rtol=0, atol=0)


@FULL
def test_grpo_train_saves_at_the_deadline(nemo_rl_cpu, contract_model, tmp_path, monkeypatch):
    """A job's deadline (`CLIPO_SAVE_BY`, slurm/common.sh) in NeMo-RL's real grpo_train: with
    no periodic save due (save_period 100) and a budget already spent, NeMo-RL's own
    `checkpoint_must_save_by` saves at the end of step 1 and stops; the checkpoint holds
    CLIPO's head (bit-equal to the workers' head after step 1) and the run state, and the
    driver reports step 1 (it exits 75, the batch script requeues). The resume from a
    checkpoint is the same code as `test_grpo_train_resume`'s."""
    import time

    import torch
    from torch.utils._pytree import tree_leaves

    from clipo_megatron.core.safe_load import load_state
    from clipo_testkit.nemo_rl.nemo_rl_loop import run_grpo

    cfg = _config(contract_model, tmp_path, "grpo", True)
    cfg["checkpointing"]["save_period"] = 100
    monkeypatch.setenv("CLIPO_SAVE_BY", str(time.time() - 1))  # the deadline has passed
    result = run_grpo(cfg, worker_fqn=nemo_rl_cpu)
    assert result["saved_at_deadline"] == 1 and result["clipo_step"] == 1
    ckpt = tmp_path / "ckpt"
    # no tmp_step_*, no step 2 (beside them NeMo-RL keeps its latest_checkpoint_status.json)
    assert sorted(p.name for p in ckpt.iterdir() if p.is_dir()) == ["step_1"]
    saved = load_state(ckpt / "step_1" / "clipo_head" / "head.pt")
    ours, theirs = tree_leaves(saved["trainer"]), tree_leaves(result["head"][0])
    tensors = [(a, b) for a, b in zip(ours, theirs) if torch.is_tensor(a)]
    assert len(ours) == len(theirs) and tensors
    assert all(torch.equal(a, b) for a, b in tensors)
    assert {s for s, prefix, _ in result["metrics"] if prefix == "train"} == {1}


def test_data_parallel_workers_match_one_worker(nemo_rl_cpu, contract_model, tmp_path):
    """Two of NeMo-RL's Megatron workers (DP = 2, on CPU) in its RayWorkerGroup: logprobs sharded
    by NeMo-RL, the CLIPO head step gathering embeddings over DP (gloo), gradients summed over DP
    by mcore DDP. Every logged number equals the one-worker run to float tolerance."""
    from clipo_testkit.nemo_rl.nemo_rl_loop import contract_config, run_grpo

    def run(dp: int):
        cfg = contract_config(
            "grpo", True, model_dir=contract_model, out_dir=tmp_path / f"dp{dp}", max_steps=2, dp=dp
        )
        return run_grpo(cfg, worker_fqn=nemo_rl_cpu)

    one, two = run(1), run(2)
    for step in (1, 2):
        a, b = _train_metrics(one, step), _train_metrics(two, step)
        assert a["clipo/valid_group_frac"] > 0
        for key in ("reward", "loss", "clipo/loss", "clipo/reward_mean", "global_valid_toks"):
            assert abs(a[key] - b[key]) <= 1e-5 * max(1.0, abs(a[key])), (step, key, a[key], b[key])
    print(f"\n[contract] DP=2 vs DP=1, steps 1-2 equal: {_train_metrics(two, 2)}")
