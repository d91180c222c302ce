# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Benchmark: CLIPO loss + reward, forward and backward, vs two baselines.

Baselines written here (not imported):
- dense: the whole-batch B x B formulation of the authors' public code
  (B x B similarity, class and group masks from ids, multinomial positive);
- loop: a naive Python loop over groups, each group a small dense block.
Ours: `group_contrastive_loss` on padded [N, G, G] blocks.

Each (method, track) runs in a fresh subprocess so its peak RSS is its own.
The timed region is loss + reward, forward and backward into the embeddings
(what flows back into the head). The head's own matmul (same for every
method) is timed separately in the `head` column.

    python bench/bench_core.py            # Track I and II, prints a table
    python bench/bench_core.py --quick    # smaller batches (smoke run)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

from clipo_megatron.core import CLIPOConfig, contrastive_rewards, group_contrastive_loss

TRACKS = {
    # name: (prompts, rollouts, hidden D, embed d)
    "track1": (512, 16, 2048, 512),  # Qwen2.5-3B, d = 512
    "track2": (128, 16, 3584, 2048),  # Qwen2.5-7B, d = 2048
}
REPEATS = {"ours": 7, "loop": 3, "dense": 3}


def make_batch(prompts: int, rollouts: int, d: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    b = prompts * rollouts
    gids = torch.arange(prompts).repeat_interleave(rollouts)
    correct = (torch.rand(b, generator=gen) < 0.6).long()
    emb = torch.nn.functional.normalize(torch.randn(b, d, generator=gen), dim=-1)
    return emb, correct, gids


def dense_loss_and_reward(emb, correct, gids, tau=0.05, lam=0.2, clip=-0.5, gen=None):
    b = emb.shape[0]
    sim = emb @ emb.T / tau  # [B, B]
    group = gids[:, None] == gids[None, :]  # [B, B]
    same = (correct[:, None] == correct[None, :]) & group
    eye = torch.eye(b, dtype=torch.bool)
    pos = (same & ~eye).float()
    other = (group & ~eye).float()
    has_pos = pos.sum(1) > 0
    has_neg = (other - pos).sum(1) > 0
    anchor = correct.bool() & has_pos & has_neg
    logits = sim - sim.max(1, keepdim=True).values.detach()
    lse = torch.log((torch.exp(logits) * other).sum(1) + 1e-8)
    weights = pos.clone()
    weights[~has_pos, 0] = 1e-8
    idx = torch.multinomial(weights, 1, generator=gen)  # [B, 1]
    loss_i = -(logits.gather(1, idx).squeeze(1) - lse) * anchor
    loss = loss_i.sum() / anchor.sum().clamp_min(1)
    reward = torch.clamp(-lam * loss_i.detach(), min=clip)
    return loss, reward


def loop_loss_and_reward(emb, correct, gids, tau=0.05, lam=0.2, clip=-0.5, gen=None):
    losses = torch.zeros(emb.shape[0], dtype=emb.dtype)
    total = emb.sum() * 0
    n_anchor = 0
    for g in torch.unique(gids).tolist():
        rows = torch.nonzero(gids == g).flatten()
        e, c = emb[rows], correct[rows].bool()
        if int(c.sum()) < 2 or int((~c).sum()) < 1:
            continue
        s = e @ e.T / tau
        k = rows.numel()
        for i in range(k):
            if not c[i]:
                continue
            pos = [j for j in range(k) if j != i and c[j]]
            p = pos[int(torch.randint(len(pos), (1,), generator=gen))]
            others = torch.tensor([j for j in range(k) if j != i])
            li = -(s[i, p] - torch.logsumexp(s[i, others], 0))
            losses[rows[i]] = li.detach()
            total = total + li
            n_anchor += 1
    loss = total / max(n_anchor, 1)
    return loss, torch.clamp(-lam * losses, min=clip)


def ours_loss_and_reward(emb, correct, gids, cfg=None, **_):
    cfg = cfg or CLIPOConfig()
    res = group_contrastive_loss(emb, correct, gids, cfg)
    return res.loss, contrastive_rewards(res, cfg)


METHODS = {
    "ours": ours_loss_and_reward,
    "loop": loop_loss_and_reward,
    "dense": dense_loss_and_reward,
}


def run_one(method: str, track: str, quick: bool) -> dict:
    torch.set_num_threads(torch.get_num_threads())
    prompts, rollouts, hidden, d = TRACKS[track]
    if quick:
        prompts = max(prompts // 8, 4)
    emb0, correct, gids = make_batch(prompts, rollouts, d)
    gen = torch.Generator().manual_seed(1)
    fn = METHODS[method]
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(REPEATS[method]):
        emb = emb0.clone().requires_grad_(True)
        t0 = time.perf_counter()
        loss, reward = fn(emb, correct, gids, gen=gen)
        loss.backward()
        times.append(time.perf_counter() - t0)
    peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss) / 1024
    # Head (Linear D -> d, only its weight learns): identical cost for every method.
    head_t = float("nan")
    if method == "ours":
        h = torch.randn(emb0.shape[0], hidden)
        w = torch.nn.Linear(hidden, d, bias=False)
        ht = []
        for _ in range(3):
            t0 = time.perf_counter()
            z = w(h)
            z.backward(torch.ones_like(z))
            ht.append(time.perf_counter() - t0)
        head_t = statistics.median(ht)
    return {
        "method": method,
        "track": track,
        "B": emb0.shape[0],
        "d": d,
        "median_s": statistics.median(times),
        "peak_mb": peak_mb,
        "head_s": head_t,
        "loss": float(loss.detach()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="1/8 of the prompts (smoke run)")
    ap.add_argument("--tracks", nargs="+", default=list(TRACKS), choices=list(TRACKS))
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--_one", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._one:
        print(json.dumps(run_one(args._one[0], args._one[1], args.quick)))
        return
    rows = []
    for track in args.tracks:
        for method in args.methods:
            cmd = [sys.executable, __file__, "--_one", method, track] + (
                ["--quick"] if args.quick else []
            )
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(f"  ran {method:5s} {track}: {rows[-1]['median_s']:.4f} s", file=sys.stderr)
    print(
        f"\nthreads={torch.get_num_threads()}  torch={torch.__version__}  (median of {REPEATS} runs; "
        "loss+reward fwd+bwd into the embeddings; peak = max RSS growth of a fresh process)\n"
    )
    print(
        "| track | B | d | method | median time (s) | dense / method | loop / method | peak mem (MB) | head fwd+bwd (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for track in args.tracks:
        tr = {r["method"]: r for r in rows if r["track"] == track}
        for r in tr.values():
            dense = tr.get("dense", {}).get("median_s", float("nan"))
            loop = tr.get("loop", {}).get("median_s", float("nan"))
            print(
                f"| {track} | {r['B']} | {r['d']} | {r['method']} | {r['median_s']:.4f} | "
                f"{dense / r['median_s']:.1f}x | {loop / r['median_s']:.1f}x | {r['peak_mb']:.0f} | "
                f"{r['head_s']:.3f} |"
            )


if __name__ == "__main__":
    main()
