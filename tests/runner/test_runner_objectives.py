# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Every objective x CLIPO on / off through the runner's real update (tiny model, 2 steps):
the logged policy loss equals a naive per-sequence loop over the same logprobs and advantages;
CLIPO off is the plain baseline (no head); DAPO's filter drops exactly the zero-variance groups
of verifiable rewards, before the head; the head's positives come from the reward threshold."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")
pytest.importorskip("math_verify")
pytest.importorskip("reasoning_gym")

# Eight 2-step runs, 30-45 s each on the shared 2-core box: slow.
pytestmark = [pytest.mark.slow, pytest.mark.mcore, pytest.mark.runner]

P, N, MAX_TOKENS = 3, 4, 5  # prompts per step, group size, response budget
TINY = [
    "model.source=tiny",
    f"rollout.prompts_per_step={P}",
    f"rollout.n={N}",
    f"rollout.max_tokens={MAX_TOKENS}",
    "rollout.backend=hf",
    "train.micro_batch=5",  # 12 rows: micro-batches of 5, 5, 2 (the normalisers must be global)
    "train.lr=1e-3",
    "model.tiny_hidden=32",
    "model.tiny_layers=1",
    "clipo.method.embed_dim=8",
    # No floor on r_CL: the tiny random policy samples from its whole vocabulary (no top_k since
    # every sampling knob is pinned), its rollouts are far apart, and at the paper's -0.5 floor
    # every correct rollout got r_CL = -0.5 exactly, a group with no spread to check.
    "clipo.method.reward_clip_min=-100",
    "threads=1",
]
# Per step, rows in prompt order (groups of N): step 0 has an all-correct and an all-wrong group.
PSEUDO_REWARDS = [
    [1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 0],
]
EPS = {"grpo": (0.2, 0.2), "dapo": (0.2, 0.28), "gspo": (3e-4, 4e-4), "gmpo": (0.4, 0.4)}
KL = {"grpo": 0.001, "dapo": 0.0, "gspo": 0.0, "gmpo": 0.0}
# Offsets to the sampling policy's logprobs (off-policy by about the clip range): ratios != 1,
# some clipped, so the clip and the aggregation both act (on-policy GSPO's loss is 0).
OFF_POLICY = {"grpo": 0.3, "dapo": 0.3, "gspo": 5e-4, "gmpo": 0.5}


def _naive_loss(objective, lp, old, adv, mask, ref):
    """The batch loss, one sequence at a time, from the paper's formulas (App. baselines)."""
    lo, hi = EPS[objective]
    per_seq, lens = [], []
    for i in range(lp.shape[0]):
        t = mask[i].nonzero().flatten().tolist()
        a = float(adv[i])
        lr = [float(lp[i, j] - old[i, j]) for j in t]
        if objective in ("grpo", "dapo"):
            terms = [-min(math.exp(x) * a, min(max(math.exp(x), 1 - lo), 1 + hi) * a) for x in lr]
            terms = [min(x, -3.0 * a) if a < 0 else x for x in terms]  # dual clip 3 (verl)
        elif objective == "gspo":
            s = math.exp(sum(lr) / len(t))
            terms = [-min(s * a, min(max(s, 1 - lo), 1 + hi) * a)] * len(t)
        else:  # gmpo
            sg = (a > 0) - (a < 0)
            clipped = [sg * min(sg * x, sg * min(max(x, -lo), hi)) for x in lr]
            terms = [-a * math.exp(sum(clipped) / len(t))] * len(t)
        if KL[objective]:
            d = [float(ref[i, j] - lp[i, j]) for j in t]
            terms = [x + KL[objective] * (math.exp(y) - y - 1) for x, y in zip(terms, d)]
        per_seq.append(sum(terms))
        lens.append(len(t))
    if objective in ("gspo", "gmpo"):  # seq-mean-token-mean (gmpo: verl geo_mean's row mean)
        return sum(s / n for s, n in zip(per_seq, lens)) / len(lens)
    return sum(per_seq) / sum(lens)  # token-mean


def _train(objective: str, enabled: bool, out_dir, monkeypatch) -> dict:
    import clipo_megatron.runner.run as run_mod
    import clipo_megatron.verify.boxed as boxed
    from clipo_megatron.runner.config import load_config
    from clipo_megatron.runner.model.policy_passes import forward_logits, token_logprobs

    calls = iter(PSEUDO_REWARDS)
    monkeypatch.setattr(
        boxed, "verify_batch", lambda texts, answers, **kw: [float(x) for x in next(calls)]
    )
    updates = []
    real_update = run_mod.policy_update

    def spy(model, optimizer, batch, *args, **kw):
        i, t = torch.meshgrid(*(torch.arange(n) for n in batch.ids.shape), indexing="ij")
        batch.old_logprobs = batch.old_logprobs + OFF_POLICY[objective] * torch.sin(
            1.7 * i + 0.9 * t
        )
        with torch.no_grad():  # the policy the update differentiates, before its step
            lp = token_logprobs(forward_logits(model, batch.ids), batch.ids)
        metrics = real_update(model, optimizer, batch, *args, **kw)
        updates.append({"batch": batch, "lp": lp, "metrics": metrics})
        return metrics

    monkeypatch.setattr(run_mod, "policy_update", spy)
    overrides = [f"clipo.objective={objective}", f"clipo.enabled={str(enabled).lower()}"]
    run = run_mod.Run(load_config(None, TINY + overrides + [f"output.dir={out_dir}"]))
    real_generate = run.gen.generate

    def uneven_lengths(*a, **kw):  # responses of 1..MAX_TOKENS tokens: token- and seq-means differ
        ro = real_generate(*a, **kw)
        ro.response_ids = [r[: 1 + i % len(r)] for i, r in enumerate(ro.response_ids)]
        return ro

    run.gen.generate = uneven_lengths
    history = [run.step() for _ in PSEUDO_REWARDS]
    run.gen.generate = real_generate
    return {"run": run, "history": history, "updates": updates}


_CACHE: dict = {}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mcore_single_process):
    """One 2-step run per (objective, CLIPO on / off), built on first use and shared."""
    from clipo_megatron.models.smollm2 import smollm2_gguf_path

    try:
        smollm2_gguf_path()  # the tokenizer
    except FileNotFoundError as e:
        pytest.skip(str(e))

    def get(objective: str, enabled: bool) -> dict:
        key = (objective, enabled)
        if key not in _CACHE:
            with pytest.MonkeyPatch.context() as mp:
                d = tmp_path_factory.mktemp(f"{objective}_{enabled}")
                _CACHE[key] = _train(objective, enabled, d, mp)
        return _CACHE[key]

    yield get
    for r in _CACHE.values():  # open until here: some tests take one more step
        r["run"].close()
    _CACHE.clear()


@pytest.mark.parametrize("enabled", [True, False], ids=["clipo", "no_clipo"])
@pytest.mark.parametrize("objective", ["grpo", "dapo", "gspo", "gmpo"])
def test_logged_policy_loss_is_the_objective(trained, objective, enabled):
    r = trained(objective, enabled)
    assert len(r["updates"]) == 2
    for u in r["updates"]:
        b = u["batch"]
        assert (b.ref_logprobs is not None) == (KL[objective] > 0)  # grpo: frozen reference
        want = _naive_loss(objective, u["lp"], b.old_logprobs, b.advantages, b.mask, b.ref_logprobs)
        assert u["metrics"]["pg/loss"] == pytest.approx(want, rel=1e-5, abs=1e-7)
    # a real signal: mixed groups, nonzero advantages, clipped and unclipped tokens, a moving policy
    assert all(abs(u["metrics"]["pg/loss"]) > 1e-5 for u in r["updates"])
    assert any(u["metrics"]["pg/grad_norm"] > 0 for u in r["updates"])


@pytest.mark.parametrize("objective", ["grpo", "dapo"])
def test_clipo_off_is_the_plain_baseline(trained, objective):
    """Off = the paper's baseline: no head built, trained or checkpointed, r_CL = 0 (as the
    NeMo-RL driver, which builds no head either)."""
    r_off, r_on = trained(objective, False), trained(objective, True)
    off, on = r_off["history"], r_on["history"]
    assert all(m["reward/clipo_mean"] == 0.0 for m in off)
    assert all(m["reward/shaped_mean"] == m["reward/mean"] for m in off)
    assert on[0]["reward/clipo_mean"] != 0.0  # the same step with CLIPO on shapes the rewards
    assert not any(k.startswith("clipo/") for m in off for k in m)  # no head step ran
    assert "clipo/loss" in on[0]
    run = r_off["run"]
    assert run.head is None and not hasattr(run.model, "clipo_head") and run.embeddings == {}
    state = run.state_dict()
    assert state["head"] is None
    # an older baseline checkpoint (it trained a head) still resumes: the head is ignored
    old = {**state, "head": r_on["run"].state_dict()["head"]}
    run.load_state_dict(old)
    assert run.head is None and run.step_idx == state["step"]
    with pytest.raises(ValueError, match="no CLIPO head .* clipo.enabled=false"):
        r_on["run"].load_state_dict(state)  # CLIPO cannot resume a baseline checkpoint


def test_dapo_filter_drops_exactly_the_zero_variance_groups(trained):
    r = trained("dapo", False)
    step0, step1 = r["updates"]
    # step 0: group 0 all correct, group 2 all wrong -> only group 1's 4 rows train
    assert r["history"][0]["train/kept_rows"] == 4.0
    assert r["history"][0]["train/dropped_groups"] == 2.0
    b = step0["batch"]
    assert b.ids.shape[0] == 4 and bool((b.advantages != 0).all())
    lengths = [1 + i % MAX_TOKENS for i in range(N, 2 * N)]  # rows 4..7 of the uneven responses
    assert b.mask.sum(1).tolist() == lengths
    assert r["history"][1]["train/kept_rows"] == 12.0  # step 1: every group mixed
    assert step1["batch"].ids.shape[0] == 12
    assert "train/kept_rows" not in trained("grpo", False)["history"][0]  # no filter elsewhere


def test_dapo_filters_verifiable_rewards_before_the_head(trained):
    """NeMo-RL's placement: the filter reads the raw rewards before the logprob pass, so the
    head sees only the kept rows and an all-correct group is dropped although its r' differ."""
    r = trained("dapo", True)
    assert r["history"][0]["train/kept_rows"] == 4.0  # filtering r' would keep group 0 (r_CL)
    assert r["run"].embeddings["start"]["emb"].shape[0] == 4  # the head step saw 4 rows
    assert r["updates"][0]["batch"].ids.shape[0] == 4
    assert r["run"].embeddings["start"]["correct"].tolist() == PSEUDO_REWARDS[0][N : 2 * N]


def test_dapo_skips_the_step_when_every_group_is_filtered(trained, monkeypatch):
    import clipo_megatron.verify.boxed as boxed

    run = trained("dapo", True)["run"]
    monkeypatch.setattr(boxed, "verify_batch", lambda texts, answers, **kw: [1.0] * len(texts))
    before = {k: v.clone() for k, v in run.model.state_dict().items() if torch.is_tensor(v)}
    head = {k: v.clone() for k, v in run.head.head.state_dict().items()}
    m = run.step()
    assert (m["train/kept_rows"], m["train/dropped_groups"], m["train/skipped_update"]) == (
        0.0, 3.0, 1.0,
    )  # fmt: skip
    assert m["time/logprob_embed"] == 0.0 and m["reward/clipo_mean"] == 0.0
    after = run.model.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())
    assert all(torch.equal(v, run.head.head.state_dict()[k]) for k, v in head.items())


def test_runner_correct_is_the_threshold(trained, monkeypatch):
    """The head's positives are `clipo.is_correct(rewards)` (the NeMo-RL driver's rule), not
    the raw verifier output: rewards 0.3 / 0.7 with thresholds 0.5 and 0.2."""
    import clipo_megatron.runner.run as run_mod
    import clipo_megatron.verify.boxed as boxed

    run = trained("grpo", True)["run"]
    frac = [0.3, 0.7, 0.7, 0.3] * P
    monkeypatch.setattr(boxed, "verify_batch", lambda texts, answers, **kw: frac[: len(texts)])
    seen, real = [], run_mod.clipo_step
    monkeypatch.setattr(
        run_mod, "clipo_step", lambda *a, **kw: seen.append(a[2].clone()) or real(*a, **kw)
    )
    for threshold in (0.5, 0.2):
        monkeypatch.setattr(run.clipo, "correct_reward_threshold", threshold)
        run.step()
    assert seen[0].tolist() == [x >= 0.5 for x in frac]
    assert seen[1].tolist() == [True] * (P * N)


def _naive_group_adv(x: list[float], groups: list[int]) -> list[float]:
    """(x - group mean) / (unbiased group std + 1e-6) where the std is > 0, one row at a time."""
    out = []
    for i, g in enumerate(groups):
        v = [x[j] for j in range(len(x)) if groups[j] == g]
        m = sum(v) / len(v)
        s = math.sqrt(sum((y - m) ** 2 for y in v) / (len(v) - 1)) if len(v) > 1 else 0.0
        out.append((x[i] - m) / (s + 1e-6) if s > 0 else 0.0)
    return out


def test_runner_logs_whether_clipo_changed_the_update(trained, monkeypatch):
    """The step's metrics carry clipo/r_cl_spread, adv_share and ranked_frac, equal to a naive
    recomputation from the step's rewards and r_CL; every step records its token hash."""
    import statistics

    import clipo_megatron.runner.run as run_mod
    import clipo_megatron.verify.boxed as boxed

    run = trained("grpo", True)["run"]
    r = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0]  # valid, valid (2 correct), all wrong
    monkeypatch.setattr(boxed, "verify_batch", lambda texts, answers, **kw: [float(x) for x in r])
    seen, real = [], run_mod.clipo_step
    monkeypatch.setattr(
        run_mod, "clipo_step", lambda *a, **kw: (lambda o: seen.append(o) or o)(real(*a, **kw))
    )
    m = run.step()
    r_cl = seen[0].rewards.double().tolist()
    groups = [i // N for i in range(P * N)]
    shaped = [x + y for x, y in zip(r, r_cl)]
    a0, a1 = _naive_group_adv([float(x) for x in r], groups), _naive_group_adv(shaped, groups)
    valid = [0, 1]  # >= 2 correct and >= 1 incorrect
    correct_rcl = [[r_cl[i] for i in range(P * N) if groups[i] == g and r[i]] for g in valid]
    spread = sum(statistics.stdev(v) for v in correct_rcl) / 2
    share = sum(abs(x - y) for x, y in zip(a1, a0)) / sum(abs(y) for y in a0)
    ranked = [max(a1[i] for i in range(P * N) if groups[i] == g and r[i]) for g in valid]
    ranked = [
        hi - min(a1[i] for i in range(P * N) if groups[i] == g and r[i])
        for g, hi in zip(valid, ranked)
    ]
    assert spread > 0 and share > 0  # the head gives the correct rollouts different r_CL
    assert m["clipo/r_cl_spread"] == pytest.approx(spread, rel=1e-5)
    assert m["clipo/adv_share"] == pytest.approx(share, rel=1e-4)
    assert m["clipo/ranked_frac"] == sum(x > 1e-5 for x in ranked) / 2
    h = [x["rollout/token_hash"] for x in trained("grpo", False)["history"] + [m]]
    assert all(isinstance(x, str) and len(x) == 16 for x in h) and len(set(h)) == len(h)


@pytest.mark.parametrize("grader, expected", [("math_verify", 1.0), ("paper", 0.0)])
def test_runner_step_rewards_with_the_configured_grader(trained, monkeypatch, grader, expected):
    """`clipo.grader` sets the runner's rewards: every rollout answers its integer gold answer
    X as `\\frac{2X}{2}`, which math-verify counts and the authors' checker does not (an
    integer gold answer needs an integer answer: docs/reproduce.md's grader)."""
    run = trained("grpo", True)["run"]
    gold = {str(p.messages): p.ground_truth for p in run.problems}
    real = run.gen.generate

    def as_fraction(prompts, n, **kw):
        ro = real(prompts, n, **kw)
        ro.texts = [
            f"so \\boxed{{\\frac{{{2 * int(gold[str(prompts[i])])}}}{{2}}}}"
            for i in ro.prompt_index
        ]
        return ro

    monkeypatch.setattr(run.gen, "generate", as_fraction)
    monkeypatch.setattr(run.cfg.clipo, "grader", grader)
    assert all(str(int(g)) == g for g in gold.values())  # integer gold answers
    assert run.step()["reward/mean"] == expected
