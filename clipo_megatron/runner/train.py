# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron train`: GRPO + CLIPO on one machine, from the library's pieces.

One RL step:
  generate (HF generator, current weights) -> verify (math-verify) ->
  logprob pass on the Megatron policy, which also pools the response hidden
  states (one forward; the pooler the NeMo-RL workers use, `megatron/microbatch_pooler.py`) -> head step (CLIPO loss,
  rewards from the pre-update loss) -> r' = r + r_CL -> group advantages ->
  policy update (clipped PG, token-mean) -> weight sync to the generator.
Checkpoints hold everything a resumed run needs to continue bit-for-bit.

    clipo-megatron train --config examples/configs/cpu_demo.yaml [--algo grpo] [key=value ...]
    torchrun --nproc-per-node 3 -m clipo_megatron.cli train --config ... parallel.tp=3   # tensor parallel
    torchrun --nproc-per-node 2 -m clipo_megatron.cli train --config ... parallel.pp=2   # pipeline parallel
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import warnings
from pathlib import Path

import torch

from clipo_megatron.core.advantages import group_advantages
from clipo_megatron.core.objectives import get_objective
from clipo_megatron.megatron.microbatch_pooler import (
    SAMPLE_IDX_KEY,
    MicrobatchPooler,
    find_final_norm,
)
from clipo_megatron.megatron.policy_passes import forward_logits, token_logprobs
from clipo_megatron.runner.config import RunConfig, load_config, to_dict

STAGES = ("generate", "verify", "logprob_embed", "head", "train", "sync")


def pack(prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int):
    """Right-padded token ids [B, S] and response mask [B, S] (True at response tokens)."""
    lens = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids)]
    s = max(lens)
    ids = torch.full((len(lens), s), pad_id, dtype=torch.long)
    mask = torch.zeros(len(lens), s, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        mask[i, len(p) : len(p) + len(r)] = True
    return ids, mask


def _micro_pg_loss(lp, old_lp, adv, mask, ntok: float, cfg: RunConfig):
    """A micro-batch's clipped PG loss, scaled so the micro-batches sum to the batch's token mean."""
    loss, stats = get_objective("grpo").loss(
        lp,
        old_lp,
        adv,
        mask,
        eps_low=cfg.train.eps_low,
        eps_high=cfg.train.eps_high,
        aggregation="token-mean",
    )
    return loss * float(mask.sum()) / max(ntok, 1.0), stats


def _pooled_microbatches(ids, mask, mb: int) -> list[dict]:
    """Microbatches as the shared pooler reads them: rows, response mask, token ids."""
    return [
        {
            SAMPLE_IDX_KEY: torch.arange(i, min(i + mb, ids.shape[0])),
            "token_mask": mask[i : i + mb],
            "ids": ids[i : i + mb],
            "mask": mask[i : i + mb],
        }
        for i in range(0, ids.shape[0], mb)
    ]


def _in_row_order(pooler: MicrobatchPooler) -> torch.Tensor:
    rows, pooled = pooler.result()
    return pooled[torch.argsort(rows)]  # [B, D]


def logprob_and_pool(model, ids, mask, micro_batch: int, logprob_fn=token_logprobs):
    """The fused logprob pass: token logprobs [B, S] and mean response hidden states [B, D].

    The same pass the NeMo-RL workers run: microbatches teed through
    `MicrobatchPooler`, the final norm hooked, one forward per microbatch.
    """
    pooler = MicrobatchPooler()
    lps = []
    model.eval()
    with torch.no_grad(), pooler.hooked(find_final_norm(model)):
        for mb in pooler.tee(_pooled_microbatches(ids, mask, micro_batch)):
            lps.append(logprob_fn(forward_logits(model, mb["ids"]), mb["ids"]))
    return torch.cat(lps), _in_row_order(pooler)


def policy_update(
    model,
    optimizer,
    ids,
    mask,
    old_lp,
    adv,
    cfg: RunConfig,
    logprob_fn=token_logprobs,
    clip_fn=torch.nn.utils.clip_grad_norm_,
) -> dict[str, float]:
    model.train()
    optimizer.zero_grad(set_to_none=True)
    ntok = float(mask[:, 1:].sum())
    total, stats = 0.0, {}
    for i in range(0, ids.shape[0], cfg.train.micro_batch):
        x, m = ids[i : i + cfg.train.micro_batch], mask[i : i + cfg.train.micro_batch]
        lp = logprob_fn(forward_logits(model, x), x)
        j = slice(i, i + x.shape[0])
        loss, stats = _micro_pg_loss(lp, old_lp[j], adv[j], m, ntok, cfg)
        loss.backward()
        total += float(loss.detach())
    grad_norm = clip_fn(model.parameters(), cfg.train.grad_clip)
    optimizer.step()
    return {"pg/loss": total, "pg/grad_norm": float(grad_norm), **stats}


def pipeline_logprob_and_pool(model, ids, mask, micro_batch: int, logprob_fn=token_logprobs):
    """`logprob_and_pool` through Megatron-Core's pipeline schedule (forward only); every stage gets the result."""
    from megatron.core import parallel_state as ps

    from clipo_megatron.runner.pipeline import (
        broadcast_from_last_stage,
        run_schedule,
        uniform_micro_batch,
    )

    b, s = ids.shape
    micro = _pooled_microbatches(ids, mask, uniform_micro_batch(b, micro_batch))
    last = ps.is_pipeline_last_stage()
    pooler = MicrobatchPooler()

    def forward_step(it, m):
        x = next(it)
        out = forward_logits(m, x["ids"])  # the last stage's final norm is hooked: pooled here
        if not last:
            return out, None
        return out, lambda logits: (logits.sum() * 0.0, {"lp": logprob_fn(logits, x["ids"])})

    model.eval()
    with torch.no_grad(), pooler.hooked(find_final_norm(model) if last else None):
        outs = run_schedule(
            model,
            micro,
            forward_step,
            forward_only=True,
            seq_length=s,
            data=pooler.tee(micro) if last else None,
        )
    res = (torch.cat([o["lp"] for o in outs]), _in_row_order(pooler)) if last else None
    return broadcast_from_last_stage(res)


def pipeline_policy_update(
    model,
    optimizer,
    ids,
    mask,
    old_lp,
    adv,
    cfg: RunConfig,
    logprob_fn=token_logprobs,
    clip_fn=None,
) -> dict[str, float]:
    """`policy_update` through the pipeline schedule (1F1B); metrics from the last stage, on every stage."""
    from megatron.core import parallel_state as ps

    from clipo_megatron.runner.pipeline import (
        allreduce_tied_embedding_grads,
        broadcast_from_last_stage,
        run_schedule,
        uniform_micro_batch,
    )

    b, s = ids.shape
    mb = uniform_micro_batch(b, cfg.train.micro_batch)
    ntok = float(mask[:, 1:].sum())
    micro = [
        {
            "ids": ids[i : i + mb],
            "mask": mask[i : i + mb],
            "old_lp": old_lp[i : i + mb],
            "adv": adv[i : i + mb],
        }
        for i in range(0, b, mb)
    ]

    def forward_step(it, m):
        x = next(it)
        out = forward_logits(m, x["ids"])
        if not ps.is_pipeline_last_stage():
            return out, None

        def loss_fn(logits):
            lp = logprob_fn(logits, x["ids"])
            loss, stats = _micro_pg_loss(lp, x["old_lp"], x["adv"], x["mask"], ntok, cfg)
            # The schedule divides by the number of micro-batches; the token mean already weighs them.
            return loss * len(micro), {"loss": float(loss.detach()), **stats}

        return out, loss_fn

    model.train()
    optimizer.zero_grad(set_to_none=True)
    outs = run_schedule(model, micro, forward_step, forward_only=False, seq_length=s)
    allreduce_tied_embedding_grads(model)
    grad_norm = clip_fn(model.parameters(), cfg.train.grad_clip)
    optimizer.step()
    stats = (
        {
            "pg/loss": sum(o["loss"] for o in outs),
            **{k: v for k, v in outs[-1].items() if k != "loss"},
        }
        if outs
        else None
    )
    return {**broadcast_from_last_stage(stats), "pg/grad_norm": float(grad_norm)}


def _per_tensor(fn):
    """Apply a per-tensor layout function (`shard`, `gather_tensor`) to an optimizer state entry's tensors."""
    return lambda name, state, *args: {
        k: fn(name, v, *args) if torch.is_tensor(v) and v.dim() else v for k, v in state.items()
    }


def max_model_len(cfg: RunConfig) -> int:
    """Prompt budget + the longest generation the run asks for (train or eval), for the vLLM engine."""
    return 1024 + max(cfg.rollout.max_tokens, cfg.eval.max_tokens)


class Run:
    """Everything one training run holds; `step()` does one RL step.

    With `parallel.tp` / `parallel.pp` > 1 (under torchrun) every rank holds its
    stage's TP shard of the policy; rank 0 alone generates and verifies
    (`self.gen` is None elsewhere). `state_dict()` is collective and returns the
    full (TP = PP = 1) layout.
    """

    def __init__(self, cfg: RunConfig):
        from clipo_megatron.generation.factory import build_rollout_generator
        from clipo_megatron.megatron.head import attach_head, build_contrastive_head
        from clipo_megatron.megatron.head_trainer import HeadTrainer
        from clipo_megatron.megatron.model_builder import transformer_config
        from clipo_megatron.runner import parallel
        from clipo_megatron.runner.policy import build_policy, load_hf_policy
        from clipo_megatron.runner.problems import load_problems

        self.cfg = cfg
        self.clipo = cfg.validate()
        self.tp, self.pp = cfg.parallel.tp, cfg.parallel.pp
        parallel.init_distributed(self.tp, self.pp)
        self.tp_group = parallel.tp_group() if self.tp > 1 else None
        self.logprob_fn = parallel.vocab_parallel_token_logprobs if self.tp > 1 else token_logprobs
        hf, self.tok = load_hf_policy(
            cfg.model.source,
            tiny_hidden=cfg.model.tiny_hidden,
            tiny_layers=cfg.model.tiny_layers,
            seed=cfg.seed,
        )
        self.model, self.arch = build_policy(hf, self.tp, self.pp)
        backend = cfg.rollout.backend
        if (self.tp > 1 or self.pp > 1) and backend != "hf":
            # The in-process vLLM engine would share torch.distributed's default group with the TP ranks.
            if backend == "vllm":
                raise ValueError(
                    "rollout.backend=vllm with parallel.tp or parallel.pp > 1: the in-process vLLM "
                    "engine cannot share the model-parallel ranks' process group; use "
                    "rollout.backend=hf (or auto)"
                )
            backend = "hf"
        self.gen = None
        if parallel.is_rank0():
            self.gen = build_rollout_generator(
                backend,
                hf,
                self.tok,
                self.arch,
                export_dir=Path(cfg.output.dir) / "generator_hf",
                seed=cfg.seed,
                max_model_len=max_model_len(cfg),
            )
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay
        )
        torch.manual_seed(cfg.seed + 1)
        head = build_contrastive_head(
            transformer_config(self.arch),
            input_size=self.arch.hidden_size,
            embed_dim=self.clipo.method.embed_dim,
            head_type=self.clipo.method.head_type,
        )
        if getattr(
            self.model, "post_process", True
        ):  # the head is replicated; it hangs on the last stage
            attach_head(self.model, head)
        self.head = HeadTrainer(head, self.clipo.method)
        self.problems = load_problems(cfg.data, cfg.data.train_size, path=cfg.data.path)
        self.step_idx = 0
        self.history: list[dict] = []
        self.embeddings: dict[str, dict] = {}

    # ---- one RL step -------------------------------------------------
    def step(self) -> dict:
        from clipo_megatron.verify.boxed import verify_batch

        cfg, t = self.cfg, {}
        p = cfg.rollout.prompts_per_step
        start = (self.step_idx * p) % len(self.problems)
        batch = [self.problems[(start + i) % len(self.problems)] for i in range(p)]

        from clipo_megatron.runner.parallel import broadcast_from_rank0

        t0 = time.perf_counter()
        ro = rewards = None
        if self.gen is not None:
            ro = self.gen.generate(
                [b.messages for b in batch],
                cfg.rollout.n,
                temperature=cfg.rollout.temperature,
                top_p=cfg.rollout.top_p,
                max_tokens=cfg.rollout.max_tokens,
                seed=cfg.seed * 1_000_003 + self.step_idx,
            )
        t["generate"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        if self.gen is not None:
            rewards = torch.tensor(
                verify_batch(ro.texts, [batch[i].answer for i in ro.prompt_index])
            )
        ro, rewards = broadcast_from_rank0((ro, rewards))  # TP ranks train on rank 0's rollouts
        t["verify"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        ids, mask = pack(ro.prompt_ids, ro.response_ids, self.tok.pad_token_id)
        lp_pass = pipeline_logprob_and_pool if self.pp > 1 else logprob_and_pool
        old_lp, pooled = lp_pass(self.model, ids, mask, cfg.train.micro_batch, self.logprob_fn)
        t["logprob_embed"] = time.perf_counter() - t0

        group_ids = torch.tensor([batch[i].index for i in ro.prompt_index])
        sample_ids = torch.arange(len(ro.texts)) + self.step_idx * len(ro.texts)
        t0 = time.perf_counter()
        out = self.head.step(pooled, rewards, group_ids, sample_ids, step=self.step_idx)
        r_cl = out.rewards if self.clipo.enabled else torch.zeros_like(rewards)
        t["head"] = time.perf_counter() - t0

        adv = group_advantages(rewards + r_cl, group_ids)
        t0 = time.perf_counter()
        metrics = {}
        if self.head.policy_should_update(self.step_idx):
            update = pipeline_policy_update if self.pp > 1 else policy_update
            metrics.update(
                update(
                    self.model,
                    self.optimizer,
                    ids,
                    mask,
                    old_lp,
                    adv,
                    cfg,
                    self.logprob_fn,
                    self._clip_fn(),
                )
            )
        t["train"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        self._sync_generator()
        t["sync"] = time.perf_counter() - t0

        metrics.update({k: v for k, v in out.metrics.items()})
        metrics.update(
            {
                "step": self.step_idx,
                "reward/mean": float(rewards.mean()),
                "reward/clipo_mean": float(r_cl.mean()),
                "reward/shaped_mean": float((rewards + r_cl).mean()),
                "response/mean_tokens": float(mask.sum(1).float().mean()),
                **{f"time/{k}": v for k, v in t.items()},
            }
        )
        emb = {"emb": out.embeddings, "correct": rewards.clone(), "group": group_ids}
        self.embeddings.setdefault("start", emb)
        self.embeddings["end"] = emb
        self.history.append(metrics)
        self.step_idx += 1
        return metrics

    # ---- model-parallel plumbing ------------------------------------
    @property
    def _parallel(self) -> bool:
        return self.tp > 1 or self.pp > 1

    def _clip_fn(self):
        if not self._parallel:
            return torch.nn.utils.clip_grad_norm_
        from clipo_megatron.runner.parallel import clip_grad_norm_model_parallel

        return clip_grad_norm_model_parallel

    def full_policy_state(self) -> dict:
        """The policy in the TP = PP = 1 layout without `_extra_state` (collective when model-parallel)."""
        if not self._parallel:
            return {
                k: v for k, v in self.model.state_dict().items() if not k.endswith("_extra_state")
            }
        from clipo_megatron.runner.pipeline import full_from_local

        return full_from_local(self.model.state_dict(), self.arch, self.tp_group)

    def _sync_generator(self) -> None:
        full = self.full_policy_state()
        if self.gen is not None:
            self.gen.sync_from_megatron(full)

    def _param_names(self) -> list[str]:
        return [n for n, _ in self.model.named_parameters()]  # the optimizer's param order

    def _full_optimizer_state(self) -> dict:
        """AdamW state keyed by full parameter name (so any TP / PP layout resumes it); collective."""
        sd = self.optimizer.state_dict()
        names = self._param_names()
        by_name = {names[i]: st for i, st in sd["state"].items()}
        if self._parallel:
            from clipo_megatron.megatron.tp_state import gather_tensor
            from clipo_megatron.runner.pipeline import full_from_local

            by_name = full_from_local(
                by_name, self.arch, self.tp_group, gather_value=_per_tensor(gather_tensor)
            )
        return {"state_by_name": by_name, "param_groups": sd["param_groups"]}

    def _local_optimizer_state(self, full: dict) -> dict:
        if "state_by_name" not in full:
            raise ValueError(
                "checkpoint optimizer state predates name-keyed checkpoints; start a new output.dir"
            )
        from clipo_megatron.megatron.tp_state import shard
        from clipo_megatron.runner.pipeline import local_from_full

        names = self._param_names()
        by_name = local_from_full(
            names, full["state_by_name"], self.arch, shard_value=_per_tensor(shard)
        )
        state = {i: by_name[n] for i, n in enumerate(names) if n in by_name}
        # This layout's param indices, the saved hyperparameters.
        groups = self.optimizer.state_dict()["param_groups"]
        saved = {k: v for k, v in full["param_groups"][0].items() if k != "params"}
        return {"state": state, "param_groups": [{**g, **saved} for g in groups]}

    # ---- checkpoint / resume ----------------------------------------
    def state_dict(self) -> dict:
        """Everything to resume, in the TP = PP = 1 layout (any layout resumes it); collective if model-parallel."""
        return {
            "step": self.step_idx,
            "policy": self.full_policy_state(),
            "optimizer": self._full_optimizer_state(),
            "head": self.head.state_dict(),
            "history": self.history,
            "embeddings": self.embeddings,
            "torch_rng": torch.get_rng_state(),
            "config": to_dict(self.cfg),
        }

    def load_state_dict(self, state: dict) -> None:
        from clipo_megatron.models.hf_convert import load_megatron_state
        from clipo_megatron.runner.pipeline import local_from_full

        full = {k: v for k, v in state["policy"].items() if not k.endswith("_extra_state")}
        load_megatron_state(self.model, local_from_full(self.model.state_dict(), full, self.arch))
        self.optimizer.load_state_dict(self._local_optimizer_state(state["optimizer"]))
        self.head.load_state_dict(state["head"])
        self.step_idx, self.history, self.embeddings = (
            state["step"],
            state["history"],
            state["embeddings"],
        )
        torch.set_rng_state(state["torch_rng"])
        self._sync_generator()


def save_checkpoint(run: Run, path: Path) -> None:
    """Collective under TP (the state is gathered); rank 0 writes."""
    from clipo_megatron.runner.parallel import barrier, is_rank0

    state = run.state_dict()
    if is_rank0():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)  # atomic: a kill mid-save never leaves a broken checkpoint
    barrier()


def evaluate(run: Run, seed_offset: int = 10_000) -> dict:
    """pass@1 over n samples at the eval temperature on a held-out generator seed."""
    from clipo_megatron.runner.problems import load_problems
    from clipo_megatron.verify.boxed import verify_batch

    e = run.cfg.eval
    probs = load_problems(run.cfg.data, e.size, seed_offset=seed_offset, path=e.path)
    t0 = time.perf_counter()
    ro = run.gen.generate(
        [p.messages for p in probs],
        e.n,
        temperature=e.temperature,
        top_p=e.top_p,
        max_tokens=e.max_tokens,
        seed=run.cfg.seed + 7,
    )
    ok = torch.tensor(verify_batch(ro.texts, [probs[i].answer for i in ro.prompt_index])).view(
        len(probs), e.n
    )
    dt = time.perf_counter() - t0
    return {
        "pass@1": float(ok.mean()),
        "problems": len(probs),
        "n": e.n,
        "seconds": dt,
        "samples_per_s": len(probs) * e.n / dt,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="clipo-megatron train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--config", help="YAML recipe (e.g. examples/configs/cpu_demo.yaml)")
    ap.add_argument("--algo", choices=["clipo", "grpo"], help="shortcut for algo=...")
    ap.add_argument("overrides", nargs="*", help="OmegaConf dotted overrides, key=value")
    args = ap.parse_intermixed_args(argv)
    # Megatron-Core on CPU warns about missing Apex/TransformerEngine on every layer.
    warnings.filterwarnings("ignore", module=r"megatron\..*")
    overrides = list(args.overrides) + ([f"algo={args.algo}"] if args.algo else [])
    cfg = load_config(args.config, overrides)
    world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun: share the cores between the ranks
    if cfg.threads or world > 1:
        torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 1) // world))
    from tqdm import tqdm

    from clipo_megatron.runner.parallel import is_rank0

    out = Path(cfg.output.dir)
    ckpt = out / "checkpoints" / "latest.pt"
    run = Run(cfg)
    rank0 = is_rank0()  # only rank 0 writes, prints and evaluates (it alone holds the generator)
    if rank0:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))
    results: dict = {}
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        run.load_state_dict(state)
        results = (
            json.loads((out / "eval_before.json").read_text())
            if (out / "eval_before.json").exists()
            else {}
        )
        if rank0:
            print(f"[clipo-megatron] resumed from {ckpt} at step {run.step_idx}")
    elif cfg.eval.before_training and cfg.eval.size > 0 and rank0:
        results = evaluate(run)
        (out / "eval_before.json").write_text(json.dumps(results, indent=2))
        print(
            f"[clipo-megatron] before training: pass@1 {results['pass@1']:.3f} "
            f"({results['samples_per_s']:.1f} samples/s)"
        )
    writer = None
    if cfg.output.tensorboard and rank0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tensorboard"), purge_step=run.step_idx)
    bar = tqdm(
        total=cfg.train.steps,
        initial=run.step_idx,
        desc=f"{cfg.algo}",
        dynamic_ncols=True,
        disable=not rank0,
    )
    with (out / "metrics.jsonl").open("a") if rank0 else contextlib.nullcontext() as log:
        while run.step_idx < cfg.train.steps:
            m = run.step()
            if rank0:
                log.write(json.dumps(m) + "\n")
                log.flush()
            if writer:
                for k, v in m.items():
                    if k != "step":
                        writer.add_scalar(k, v, m["step"])
            bar.set_postfix(
                reward=f"{m['reward/mean']:.2f}",
                cl_loss=f"{m.get('clipo/loss', 0):.2f}",
                valid=f"{m.get('clipo/valid_group_frac', 0):.2f}",
            )
            bar.update(1)
            if run.step_idx % cfg.output.checkpoint_every == 0 or run.step_idx == cfg.train.steps:
                save_checkpoint(run, ckpt)
    bar.close()
    if writer:
        writer.close()
    if not rank0:
        return 0
    final = evaluate(run) if cfg.eval.size > 0 else {}
    write_results(out, cfg, run, results, final)
    if cfg.output.plots:
        from clipo_megatron.runner.plots import plot_curves, plot_tsne

        plot_curves(run.history, out / "curves.png", title=cfg.algo)
        plot_tsne(run.embeddings, out / "tsne.png")
    print((out / "results.md").read_text())
    return 0


def write_results(out: Path, cfg: RunConfig, run: Run, before: dict, after: dict) -> None:
    h = run.history
    k = max(1, len(h) // 4)
    first = sum(x["reward/mean"] for x in h[:k]) / k
    last = sum(x["reward/mean"] for x in h[-k:]) / k
    steps_t = {s: sum(x[f"time/{s}"] for x in h) / len(h) for s in STAGES}
    res = {
        "algo": cfg.algo,
        "steps": len(h),
        "train_reward_first_quarter": first,
        "train_reward_last_quarter": last,
        "eval_before": before,
        "eval_after": after,
        "mean_step_seconds": steps_t,
    }
    (out / "results.json").write_text(json.dumps(res, indent=2))
    lines = [
        f"# {cfg.algo} on {cfg.data.dataset} ({cfg.model.source}), {len(h)} steps",
        "",
        "| metric | value |",
        "|---|---|",
        f"| train reward, first quarter of steps | {first:.3f} |",
        f"| train reward, last quarter of steps | {last:.3f} |",
    ]
    if before:
        lines.append(
            f"| held-out pass@1 before (n={before['n']}, T={cfg.eval.temperature}) | {before['pass@1']:.3f} |"
        )
    if after:
        lines.append(
            f"| held-out pass@1 after (n={after['n']}, T={cfg.eval.temperature}) | {after['pass@1']:.3f} |"
        )
        lines.append(f"| eval throughput (samples/s) | {after['samples_per_s']:.1f} |")
    lines.append(
        "| mean step time (s): "
        + " / ".join(STAGES)
        + " | "
        + " / ".join(f"{steps_t[s]:.1f}" for s in STAGES)
        + " |"
    )
    (out / "results.md").write_text("\n".join(lines) + "\n")
