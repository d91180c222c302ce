# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Group contrastive losses and rewards vs a naive per-group, per-anchor reference.

The reference below is written from the paper's formulas with Python loops
over groups and anchors; the vectorised implementation must match it in
value and in gradient w.r.t. the embeddings. Tolerances: fp64 1e-12; fp32
rtol 1e-6 and atol = 4 ulp of the largest logit |s| (a loss is a difference
of log-sum-exps of size up to 1/tau = 20..50, where the fp32 spacing is
1.9e-6..3.8e-6; for tau = 0.05 this atol is 9.5e-6).
"""

from __future__ import annotations

import math

import pytest
import torch

from clipo_megatron.core import (
    CLIPOConfig,
    GroupLayout,
    contrastive_metrics,
    contrastive_rewards,
    counter_uniform,
    group_contrastive_loss,
)


def naive_losses(emb, correct, gids, cfg, step=0, sample_ids=None):
    """Per-anchor loss [B] and anchor mask [B] with explicit loops (the spec)."""
    b = emb.shape[0]
    sample_ids = torch.arange(b) if sample_ids is None else sample_ids
    e = torch.nn.functional.normalize(emb, dim=-1, eps=1e-12) if cfg.similarity == "cosine" else emb
    losses = [emb.sum() * 0 for _ in range(b)]
    anchors = [False] * b
    for g in sorted(set(gids.tolist())):
        rows = [i for i in range(b) if int(gids[i]) == g]
        for i in rows:
            ci = bool(correct[i])
            if cfg.anchors == "correct" and not ci or cfg.anchors == "incorrect" and ci:
                continue
            pos = [j for j in rows if j != i and bool(correct[j]) == ci]
            neg = [j for j in rows if bool(correct[j]) != ci]
            if not pos or not neg:
                continue
            anchors[i] = True
            s = {j: torch.dot(e[i], e[j]) / cfg.temperature for j in rows if j != i}
            self_ = [i] if cfg.denominator_includes_anchor else []
            s[i] = torch.dot(e[i], e[i]) / cfg.temperature
            others = [j for j in rows if j != i] + self_

            def lse(js, s=s):
                return torch.logsumexp(torch.stack([s[j] for j in js]), 0)

            if cfg.loss_type == "infonce":
                ordered = sorted(pos, key=lambda j: int(sample_ids[j]))
                u = float(
                    counter_uniform(cfg.seed, step, torch.tensor(g), sample_ids[i : i + 1].long())[
                        0
                    ]
                )
                p = ordered[min(int(math.floor(u * len(ordered))), len(ordered) - 1)]
                den = others if cfg.denominator == "all_others" else [p] + neg + self_
                losses[i] = -(s[p] - lse(den))
            elif cfg.loss_type == "supcon":
                terms = []
                for p in pos:
                    den = others if cfg.denominator == "all_others" else [p] + neg + self_
                    terms.append(s[p] - lse(den))
                losses[i] = -torch.stack(terms).mean()
            else:
                losses[i] = -(lse(pos) - lse(others))
    per = torch.stack(losses)
    mask = torch.tensor(anchors)
    return per, mask


def naive_rewards(per, mask, valid_group, cfg, correct):
    """Authors' reward, `clamp(c - lambda * loss * correct, -0.5)` on every row (invalid
    groups included): only correct anchors count their loss (every anchor with
    reward_incorrect_anchors). `valid_group` is unused: validity does not change the reward."""
    out = []
    for i in range(per.shape[0]):
        rewarded = bool(mask[i]) and (bool(correct[i]) or cfg.reward_incorrect_anchors)
        loss = float(per[i]) if rewarded else 0.0
        out.append(max(cfg.reward_constant - cfg.lam * loss, cfg.reward_clip_min))
    return torch.tensor(out, dtype=torch.float64)


def ragged_batch(seed, n_groups=7, g_max=9, d=16, dtype=torch.float32):
    """Random ragged groups with shuffled rows and non-contiguous group ids."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, g_max + 1, (n_groups,), generator=gen)
    gids = torch.repeat_interleave(torch.arange(n_groups) * 13 + 5, sizes)
    b = gids.numel()
    perm = torch.randperm(b, generator=gen)
    gids = gids[perm]
    correct = (torch.rand(b, generator=gen) < 0.6).long()
    emb = torch.randn(b, d, generator=gen, dtype=dtype)
    sample_ids = torch.randperm(10 * b, generator=gen)[:b]
    return emb, correct, gids, sample_ids


CONFIGS = [
    dict(loss_type="infonce"),
    dict(loss_type="supcon"),
    dict(loss_type="softnn"),
    dict(loss_type="infonce", denominator="positive_and_negatives"),
    dict(loss_type="supcon", denominator="positive_and_negatives"),
    dict(loss_type="infonce", anchors="all"),
    dict(loss_type="infonce", denominator_includes_anchor=True),
    dict(
        loss_type="supcon", denominator="positive_and_negatives", denominator_includes_anchor=True
    ),
    dict(loss_type="softnn", denominator_includes_anchor=True),
    dict(loss_type="supcon", anchors="incorrect"),
    dict(loss_type="supcon", anchors="incorrect", reward_incorrect_anchors=True),
    dict(loss_type="infonce", anchors="all", reward_incorrect_anchors=True),
    dict(loss_type="infonce", similarity="dot", temperature=0.5),
    dict(loss_type="softnn", temperature=0.02, reward_constant=0.1),
    dict(loss_type="infonce", reward_constant=0.3),  # c in invalid groups too
    dict(loss_type="supcon", reward_constant=-0.7),  # c below clip_min: clamped on every row
]


@pytest.mark.parametrize("kw", CONFIGS, ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_naive_reference(kw, dtype, seed):
    cfg = CLIPOConfig(**kw)
    emb, correct, gids, sids = ragged_batch(seed, dtype=dtype)
    if dtype == torch.float32:
        e = torch.nn.functional.normalize(emb, dim=-1) if cfg.similarity == "cosine" else emb
        s_max = float((e @ e.T).abs().max()) / cfg.temperature
        tol = dict(rtol=1e-6, atol=4 * torch.finfo(torch.float32).eps * max(s_max, 1.0))
    else:
        tol = dict(rtol=1e-12, atol=1e-12)

    e1 = emb.clone().requires_grad_(True)
    res = group_contrastive_loss(e1, correct, gids, cfg, step=3, sample_ids=sids)
    e2 = emb.clone().requires_grad_(True)
    per, mask = naive_losses(e2, correct, gids, cfg, step=3, sample_ids=sids)

    assert torch.equal(res.anchor_mask, mask)
    assert res.num_anchors == int(mask.sum()) > 0
    torch.testing.assert_close(res.per_sample_loss, per.to(res.per_sample_loss.dtype), **tol)
    ref_loss = per.sum() / max(int(mask.sum()), 1)
    torch.testing.assert_close(res.loss, ref_loss.to(res.loss.dtype), **tol)

    res.loss.backward()
    ref_loss.backward()
    torch.testing.assert_close(e1.grad, e2.grad, **tol)

    r = contrastive_rewards(res, cfg)
    torch.testing.assert_close(
        r.double(), naive_rewards(per.detach(), mask, res.valid_group, cfg, correct), **tol
    )


def test_hand_computed_two_positives_one_negative():
    # Group of 3: e0 = e1 = [1, 0] (correct), e2 = [0, 1] (wrong); tau = 0.5.
    # Anchor 0: positive 1 (the only one), s01 = 1/0.5 = 2, s02 = 0.
    # InfoNCE (all_others): L0 = -(2 - log(e^2 + e^0)) = log(1 + e^-2) = 0.126928011
    # Reward: max(0 - 0.2 * 0.126928011, -0.5) = -0.025385602; wrong rollout gets 0.
    cfg = CLIPOConfig(temperature=0.5)
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    res = group_contrastive_loss(emb, torch.tensor([1, 1, 0]), torch.tensor([4, 4, 4]), cfg)
    expected = math.log(1 + math.exp(-2))
    torch.testing.assert_close(
        res.per_sample_loss, torch.tensor([expected, expected, 0.0], dtype=torch.float64)
    )
    assert res.positive_index.tolist() == [1, 0, -1]
    r = contrastive_rewards(res, cfg)
    torch.testing.assert_close(
        r, torch.tensor([-0.2 * expected, -0.2 * expected, 0.0], dtype=torch.float64)
    )
    # positive_and_negatives denominator: {p} u N = same set here -> same value.
    res2 = group_contrastive_loss(
        emb,
        torch.tensor([1, 1, 0]),
        torch.tensor([4, 4, 4]),
        CLIPOConfig(temperature=0.5, denominator="positive_and_negatives"),
    )
    torch.testing.assert_close(res2.per_sample_loss, res.per_sample_loss)
    # Paper's eq. form, anchor in its own denominator (s_00 = 2):
    # L0 = -(2 - log(e^2 + e^2 + e^0)) = log(2 + e^-2) = 0.761549...
    res3 = group_contrastive_loss(
        emb,
        torch.tensor([1, 1, 0]),
        torch.tensor([4, 4, 4]),
        CLIPOConfig(temperature=0.5, denominator_includes_anchor=True),
    )
    torch.testing.assert_close(float(res3.per_sample_loss[0]), math.log(2 + math.exp(-2)))


def test_infonce_floor_log_k_minus_1_and_variant():
    # k identical correct embeddings, one orthogonal wrong one, tau -> small:
    # all_others keeps k-2 other positives in the denominator, so L -> log(k-1);
    # the positive_and_negatives variant drops them, so L -> 0.
    k = 14
    emb = torch.cat(
        [torch.ones(k, 1) @ torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]] * 2)]
    ).double()
    correct = torch.tensor([1] * k + [0, 0])
    gids = torch.zeros(k + 2, dtype=torch.long)
    res = group_contrastive_loss(emb, correct, gids, CLIPOConfig(temperature=0.01))
    torch.testing.assert_close(
        res.per_sample_loss[:k], torch.full((k,), math.log(k - 1), dtype=torch.float64)
    )
    r = contrastive_rewards(res, CLIPOConfig())
    assert torch.all(r[:k] == -0.5)  # 0.2 * log(13) = 0.513 -> clamped: the full penalty
    res2 = group_contrastive_loss(
        emb, correct, gids, CLIPOConfig(temperature=0.01, denominator="positive_and_negatives")
    )
    assert float(res2.per_sample_loss[:k].max()) < 1e-30


@pytest.mark.parametrize(
    "correct,expect_anchors",
    [
        ([1, 1, 1, 1], 0),  # all correct: no negative -> invalid
        ([0, 0, 0, 0], 0),  # all wrong: no positive pair
        ([1, 0, 0, 0], 0),  # single positive: no pair
        ([1, 1, 0, 0], 2),  # valid
    ],
)
def test_group_validity(correct, expect_anchors):
    cfg = CLIPOConfig()
    emb = torch.randn(4, 8, requires_grad=True)
    res = group_contrastive_loss(emb, torch.tensor(correct), torch.zeros(4, dtype=torch.long), cfg)
    assert res.num_anchors == expect_anchors
    r = contrastive_rewards(res, cfg)
    if expect_anchors == 0:
        assert torch.all(res.per_sample_loss == 0) and torch.all(r == 0)
        assert float(res.loss.detach()) == 0.0
        assert not bool(res.valid_group.any())
    res.loss.backward()  # no crash without a valid group (authors' code crashes here)
    assert emb.grad is not None and torch.isfinite(emb.grad).all()


def test_group_of_size_one_and_mixed_with_valid():
    cfg = CLIPOConfig()
    emb = torch.randn(5, 8)
    res = group_contrastive_loss(
        emb, torch.tensor([1, 1, 1, 0, 1]), torch.tensor([0, 0, 0, 0, 9]), cfg
    )
    assert res.anchor_mask.tolist() == [True, True, True, False, False]
    assert res.valid_group.tolist() == [True, True, True, True, False]
    assert float(contrastive_rewards(res, cfg)[4]) == 0.0


def test_rewards_clamp_and_constant():
    cfg = CLIPOConfig(reward_constant=0.3, reward_lambda=1.0, reward_clip_min=-0.5)
    emb = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    res = group_contrastive_loss(
        emb, torch.tensor([1, 1, 0, 1, 1, 1]), torch.tensor([0, 0, 0, 1, 1, 1]), cfg
    )
    r = contrastive_rewards(res, cfg)
    for i in range(2):
        assert float(r[i]) == pytest.approx(
            max(0.3 - float(res.per_sample_loss[i]), -0.5), abs=1e-7
        )
    assert float(r[2]) == pytest.approx(0.3)  # wrong rollout of a valid group: c
    assert r[3:].tolist() == pytest.approx([0.3] * 3)  # invalid group (all correct): c too


def test_reward_constant_below_clip_min_is_clamped_on_every_row():
    """Authors: clamp(c - lambda * L * [anchor], clip_min) everywhere, so c = -0.7 with
    clip_min = -0.5 gives -0.5 to non-anchors of valid and invalid groups alike."""
    cfg = CLIPOConfig(reward_constant=-0.7, reward_clip_min=-0.5)
    res = group_contrastive_loss(
        torch.randn(6, 4, generator=torch.Generator().manual_seed(1)),
        torch.tensor([1, 1, 0, 1, 1, 1]),
        torch.tensor([0, 0, 0, 1, 1, 1]),
        cfg,
    )
    assert contrastive_rewards(res, cfg).tolist() == pytest.approx([-0.5] * 6)


def test_metrics_values():
    # Valid group: e0 = e1 = [1,0] correct, e2 = [0.6, 0.8] wrong.
    # pos cos = 1 (pairs 0-1, 1-0); neg cos = 0.6 (pairs 0-2, 1-2); gap = 0.4.
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.6, 0.8], [1.0, 0.0]])
    res = group_contrastive_loss(
        emb, torch.tensor([1, 1, 0, 1]), torch.tensor([0, 0, 0, 1]), CLIPOConfig()
    )
    m = contrastive_metrics(res, contrastive_rewards(res, CLIPOConfig()))
    assert m["clipo/valid_group_frac"] == pytest.approx(0.5)
    assert m["clipo/pos_cos"] == pytest.approx(1.0, abs=1e-6)
    assert m["clipo/neg_cos"] == pytest.approx(0.6, abs=1e-6)
    assert m["clipo/pos_neg_gap"] == pytest.approx(0.4, abs=1e-6)
    assert m["clipo/num_anchors"] == 2
    assert m["clipo/loss"] == pytest.approx(float(res.per_sample_loss[:2].mean()), abs=1e-7)


def test_local_mask_sums_to_full_loss():
    emb, correct, gids, sids = ragged_batch(5)
    cfg = CLIPOConfig(loss_type="supcon")
    full = group_contrastive_loss(emb, correct, gids, cfg, sample_ids=sids)
    half = torch.arange(emb.shape[0]) % 2 == 0
    a = group_contrastive_loss(emb, correct, gids, cfg, sample_ids=sids, local_mask=half)
    b = group_contrastive_loss(emb, correct, gids, cfg, sample_ids=sids, local_mask=~half)
    torch.testing.assert_close(a.loss + b.loss, full.loss, rtol=1e-6, atol=1e-6)


def test_sum_reduce_sharded_embedding_dim_equals_full():
    # A column-parallel head gives each TP rank a slice of d. `sum_reduce` is
    # called once, on the partial raw Gram blocks; an all-reduce makes them full.
    # Emulate rank 0 of 3: its reduce adds the other ranks' partials as constants
    # (an all-reduce whose backward is the identity), and rank 0's gradient must
    # equal the first 4 columns of the unsharded gradient.
    emb, correct, gids, sids = ragged_batch(7, d=12, dtype=torch.float64)
    cfg = CLIPOConfig()
    full_e = emb.clone().requires_grad_(True)
    full = group_contrastive_loss(full_e, correct, gids, cfg, sample_ids=sids)
    full.loss.backward()

    shards = emb.split(4, dim=1)
    layout = GroupLayout.from_group_ids(gids, sort_keys=sids)
    # [N, G, G] raw Gram summed over the 3 shards = what the TP all-reduce returns.
    gram = sum(torch.bmm(layout.to_padded(s), layout.to_padded(s).transpose(1, 2)) for s in shards)
    totals = iter([gram])
    shard0 = shards[0].clone().requires_grad_(True)
    sharded = group_contrastive_loss(
        shard0,
        correct,
        gids,
        cfg,
        sample_ids=sids,
        sum_reduce=lambda t: t + (next(totals) - t).detach(),
    )
    torch.testing.assert_close(
        sharded.per_sample_loss, full.per_sample_loss, rtol=1e-12, atol=1e-12
    )
    sharded.loss.backward()
    torch.testing.assert_close(shard0.grad, full_e.grad[:, :4], rtol=1e-10, atol=1e-12)


def test_dtype_bf16_is_upcast():
    emb, correct, gids, sids = ragged_batch(3)
    res = group_contrastive_loss(emb.bfloat16(), correct, gids, CLIPOConfig(), sample_ids=sids)
    assert res.per_sample_loss.dtype == torch.float32


def test_contiguous_fast_path_equals_gather_path():
    # "Every G rows" batches take a zero-copy view; a permuted copy takes the
    # gather path. Values and gradients must agree (row for row).
    gen = torch.Generator().manual_seed(9)
    emb = torch.randn(6 * 8, 16, generator=gen, dtype=torch.float64)
    gids = torch.arange(6).repeat_interleave(8)
    correct = torch.randint(0, 2, (48,), generator=gen)
    from clipo_megatron.core import GroupLayout as _GL

    assert _GL.from_group_ids(gids).is_identity
    perm = torch.randperm(48, generator=gen)
    assert not _GL.from_group_ids(gids[perm], sort_keys=perm).is_identity
    e1 = emb.clone().requires_grad_(True)
    r1 = group_contrastive_loss(e1, correct, gids, CLIPOConfig(loss_type="supcon"))
    r1.loss.backward()
    e2 = emb[perm].clone().requires_grad_(True)
    r2 = group_contrastive_loss(
        e2, correct[perm], gids[perm], CLIPOConfig(loss_type="supcon"), sample_ids=perm
    )
    r2.loss.backward()
    torch.testing.assert_close(r2.per_sample_loss, r1.per_sample_loss[perm], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(e2.grad, e1.grad[perm], rtol=1e-12, atol=1e-12)
