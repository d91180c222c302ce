# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Checks that make the contract suite fail when CLIPO is broken, from the per-row values a run used.

The run's trace (`tracing.Trace`) holds, per GRPO step, what the run actually used: the rows of the logprob
pass, the pooled states the head saw, NeMo-RL's rewards and prompt rows, r_CL, and the advantages
`Policy.train` received. Each check recomputes something independently:

- `check_advantages`: NeMo-RL trained on GRPO(r + r_CL) (the group normalisation written here
  from its definition, not imported);
- `check_r_cl_rows`: r_CL has the paper's shape row by row (catches r_CL on the wrong rows);
- `check_pooled_states`: the pooled states are the means of the final-norm states over the
  response tokens, recomputed with Hugging Face's model (step 1: the initial weights);
- `check_head_moved`: the head's weights changed over the run.
"""

from __future__ import annotations

from pathlib import Path

import torch


def grpo_advantages(prompt_ids, rewards, *, leave_one_out: bool, normalize: bool) -> torch.Tensor:
    """[B] GRPO advantages: r - mean of the group (of the others with leave-one-out), divided by
    the unbiased std of the same set plus 1e-6 where that std > 0 (NeMo-RL's estimator)."""
    r = rewards.double()
    _, group = torch.unique(prompt_ids, dim=0, return_inverse=True)
    out = torch.zeros_like(r)
    for g in group.unique():
        idx = (group == g).nonzero().flatten()
        if idx.numel() <= 1:
            continue  # a lone sample: baseline = its reward, advantage 0
        for i in idx.tolist():
            pool = r[idx[idx != i]] if leave_one_out else r[idx]
            adv = r[i] - pool.mean()
            std = pool.std(unbiased=True) if pool.numel() > 1 else torch.tensor(0.0)
            std = torch.nan_to_num(std, 0.0)
            out[i] = adv / (std + 1e-6) if normalize and std > 0 else adv
    return out


def estimator_options(config: dict) -> dict:
    est = config["grpo"].get("adv_estimator") or {}
    get = lambda k: est.get(k, config["grpo"][k])  # noqa: E731
    return {
        "leave_one_out": bool(get("use_leave_one_out_baseline")),
        "normalize": bool(get("normalize_rewards")),
    }


def check_advantages(entry: dict, config: dict) -> float:
    """Advantages trained on == GRPO(r + r_CL); returns the largest |difference|."""
    expected = grpo_advantages(
        entry["prompt_ids"],
        entry["rewards"].double() + entry["r_cl"].double(),
        **estimator_options(config),
    )
    lo, hi = config["grpo"].get("advantage_clip_low"), config["grpo"].get("advantage_clip_high")
    if lo is not None or hi is not None:
        expected = expected.clamp(min=lo, max=hi)
    mask = entry["advantage_mask"].bool()  # [B, S]
    got = entry["advantages"].double()[mask]
    want = expected[:, None].expand_as(mask)[mask]
    err = float((got - want).abs().max())
    assert err <= 1e-5 * max(1.0, float(want.abs().max())), (
        f"advantages trained on differ from GRPO(r + r_CL) by {err}: "
        f"got {entry['advantages'][:, 0].tolist()} want {expected.tolist()}"
    )
    return err


def check_r_cl_rows(entry: dict, method: dict) -> None:
    """Per group (>= 2 correct and >= 1 incorrect: valid): incorrect rows get exactly c, correct rows
    max(c - lambda L, clip_min) in [clip_min, c]; rows of other groups get 0 (core/rewards.py)."""
    c, lo = float(method["reward_constant"]), float(method["reward_clip_min"])
    _, group = torch.unique(entry["prompt_ids"], dim=0, return_inverse=True)
    r_cl, correct = entry["r_cl"].double(), entry["correct"].bool()
    for g in group.unique():
        m = group == g
        n_ok, n_bad = int((m & correct).sum()), int((m & ~correct).sum())
        if n_ok >= 2 and n_bad >= 1:
            assert torch.all(r_cl[m & ~correct] == c), (g, r_cl[m].tolist(), correct[m].tolist())
            ok = r_cl[m & correct]
            assert torch.all((ok >= lo - 1e-6) & (ok <= c)), (
                g,
                r_cl[m].tolist(),
                correct[m].tolist(),
            )
        else:
            assert torch.all(r_cl[m] == 0), (g, r_cl[m].tolist(), correct[m].tolist())


def within_group_spread(entry: dict) -> float:
    """Largest (max - min) r_CL among the correct rollouts of one group."""
    _, group = torch.unique(entry["prompt_ids"], dim=0, return_inverse=True)
    out = 0.0
    for g in group.unique():
        vals = entry["r_cl"][(group == g) & entry["correct"].bool()]
        if vals.numel() >= 2:
            out = max(out, float(vals.max() - vals.min()))
    return out


@torch.no_grad()
def check_pooled_states(entry: dict, model_dir: Path, tol: float = 1e-4) -> float:
    """Pooled state of each row == mean of HF's final-norm output over its response tokens (fp32,
    tolerance 1e-4: Megatron-Core vs Hugging Face kernels on 64-wide states of order 1; a bf16
    policy passes its own bound)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    worst = 0.0
    for i in range(entry["input_ids"].shape[0]):
        n = int(entry["input_lengths"][i])
        states = model.model(entry["input_ids"][i : i + 1, :n]).last_hidden_state[0]  # [n, H]
        resp = entry["token_mask"][i, :n].bool()
        want = states[resp].mean(0)
        worst = max(worst, float((entry["pooled"][i] - want).abs().max()))
    assert worst <= tol, f"pooled states are not the response-token means (max error {worst})"
    return worst


def check_head_moved(start: list[dict], end: list[dict]) -> None:
    moved = [
        not torch.equal(a, b)
        for s, e in zip(start, end)
        if s
        for a, b in zip(s["head"].values(), e["head"].values())
    ]
    assert moved and all(moved), "the contrastive head's weights did not change over the run"
