# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`Run`: everything one training run holds, and one RL step.

One RL step:
  generate (current weights) -> verify (math-verify) -> fused logprob pass on the
  Megatron policy, which also pools the response hidden states (and, with a KL term,
  the frozen reference policy's logprobs) -> head step (CLIPO loss, rewards from the
  pre-update loss) -> r' = r + r_CL (r_CL = 0 with clipo.enabled=false) -> group
  advantages -> the objective's filter (DAPO: drop zero-variance groups) -> policy
  update on the registry objective (`clipo.objective`) -> weight sync to the generator.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from clipo_megatron.core.advantages import group_advantages
from clipo_megatron.core.rewards import shaped_rewards
from clipo_megatron.megatron.clipo_step import clipo_step
from clipo_megatron.runner import optim_state, parallel
from clipo_megatron.runner.config import RunConfig, to_dict
from clipo_megatron.runner.layout import Layout
from clipo_megatron.runner.passes import (
    PolicyLoss,
    UpdateBatch,
    logprob_and_pool,
    pack,
    policy_update,
)

STAGES = ("generate", "verify", "logprob_embed", "head", "train", "sync")


def max_model_len(cfg: RunConfig) -> int:
    """Prompt budget + the longest generation the run asks for (train or eval), for the vLLM engine."""
    return 1024 + max(cfg.rollout.max_tokens, cfg.eval.max_tokens)


class Run:
    """Everything one training run holds; `step()` does one RL step.

    With `parallel.tp` / `parallel.pp` > 1 (under torchrun) every rank holds its
    stage's TP shard of the policy; rank 0 alone generates and verifies
    (`self.gen` is None elsewhere). Whatever differs between layouts is asked of
    `self.layout` (`runner/layout.py`). `state_dict()` is collective and returns the
    full (TP = PP = 1) layout.
    """

    def __init__(self, cfg: RunConfig):
        from clipo_megatron.generation.factory import build_rollout_generator
        from clipo_megatron.megatron.head import attach_head, build_contrastive_head
        from clipo_megatron.megatron.head_trainer import HeadTrainer
        from clipo_megatron.megatron.model_builder import transformer_config
        from clipo_megatron.models.hf_policy import load_hf_policy
        from clipo_megatron.runner.policy import build_policy
        from clipo_megatron.runner.problems import load_problems

        cfg.validate()
        self.cfg, self.clipo = cfg, cfg.clipo
        self.loss_fn = PolicyLoss(
            cfg.objective(), cfg.train.eps_low, cfg.train.eps_high, cfg.effective_kl_coef()
        )
        self.layout = Layout.init(cfg.parallel.tp, cfg.parallel.pp)
        hf, self.tok = load_hf_policy(
            cfg.model.source,
            tiny_hidden=cfg.model.tiny_hidden,
            tiny_layers=cfg.model.tiny_layers,
            seed=cfg.seed,
        )
        self.model, self.arch = build_policy(hf, self.layout.tp, self.layout.pp)
        # The KL term's reference: the initial policy, frozen (rebuilt the same way on resume).
        self.ref_model = None
        if self.loss_fn.kl_coef > 0:
            self.ref_model = build_policy(hf, self.layout.tp, self.layout.pp)[0]
            self.ref_model.requires_grad_(False)
        split = self.layout.model_parallel
        backend = "hf" if split and cfg.rollout.backend == "auto" else cfg.rollout.backend
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
        # The head and its trainer live on the last pipeline stage only (built on every rank so
        # every rank draws the same random numbers); `clipo_step` broadcasts r_CL to the others.
        self.head: HeadTrainer | None = None
        if getattr(self.model, "post_process", True):
            attach_head(self.model, head)
            self.head = HeadTrainer(head, self.clipo.method)
        self.problems = load_problems(cfg.data, cfg.data.train_size, path=cfg.data.path)
        self.step_idx = 0
        self.history: list[dict] = []
        self.embeddings: dict[str, dict] = {}

    # ---- one RL step -------------------------------------------------
    def _rollouts(self, t: dict):
        """Rank 0 generates and verifies; every rank gets (prompts, rollouts, rewards [B])."""
        from clipo_megatron.verify.boxed import verify_batch

        cfg = self.cfg
        p = cfg.rollout.prompts_per_step
        start = (self.step_idx * p) % len(self.problems)
        batch = [self.problems[(start + i) % len(self.problems)] for i in range(p)]
        t0 = time.perf_counter()
        ro: Any = None
        rewards: torch.Tensor | None = None
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
                verify_batch(ro.texts, [batch[i].ground_truth for i in ro.prompt_index])
            )
        ro, rewards = parallel.broadcast_from_rank0((ro, rewards))  # all ranks train on rank 0's
        t["verify"] = time.perf_counter() - t0
        return batch, ro, rewards

    def _update(self, batch: UpdateBatch, shaped: torch.Tensor, group_ids) -> dict:
        """The objective's filter, then one policy update (none when every group is filtered)."""
        kept = self.loss_fn.objective.filter_groups(shaped, group_ids)
        metrics: dict[str, float] = {}
        if kept is not None:
            batch = batch.rows(kept.keep)
            metrics["train/kept_rows"] = float(kept.keep.sum())
            metrics["train/dropped_groups"] = float(kept.num_dropped_groups)
        if batch.ids.shape[0] == 0:
            return {**metrics, "train/skipped_update": 1.0}
        metrics.update(
            policy_update(
                self.model,
                self.optimizer,
                batch,
                self.loss_fn,
                self.cfg.train.micro_batch,
                self.cfg.train.grad_clip,
                layout=self.layout,
                shared_prefix=self.cfg.train.shared_prefix,
            )
        )
        return {**metrics, "train/skipped_update": 0.0}

    def policy_updates_now(self) -> bool:
        """CLIPO's warm-up (the head trains alone first) applies only with CLIPO on."""
        return not self.clipo.enabled or self.clipo.method.policy_updates_at(self.step_idx)

    def step(self) -> dict:
        cfg, t = self.cfg, dict[str, float]()
        batch, ro, rewards = self._rollouts(t)

        t0 = time.perf_counter()
        ids, mask = pack(ro.prompt_ids, ro.response_ids, self.tok.pad_token_id)
        old_lp, pooled, ref_lp = logprob_and_pool(
            self.model,
            ids,
            mask,
            cfg.train.micro_batch,
            self.ref_model,
            layout=self.layout,
            shared_prefix=cfg.train.shared_prefix,
        )
        t["logprob_embed"] = time.perf_counter() - t0

        group_ids = torch.tensor([batch[i].index for i in ro.prompt_index])
        sample_ids = torch.arange(len(ro.texts)) + self.step_idx * len(ro.texts)
        t0 = time.perf_counter()
        out = clipo_step(
            self.head,
            pooled if self.head is not None else None,
            rewards,
            group_ids,
            sample_ids,
            step=self.step_idx,
            pp_group=self.layout.groups.pp,
            device=pooled.device,
        )
        r_cl = out.rewards if self.clipo.enabled else torch.zeros_like(rewards)
        t["head"] = time.perf_counter() - t0

        shaped = shaped_rewards(rewards, r_cl)  # [B] r' = r + r_CL
        adv = group_advantages(shaped, group_ids)
        t0 = time.perf_counter()
        metrics = {}
        if self.policy_updates_now():
            metrics = self._update(UpdateBatch(ids, mask, old_lp, adv, ref_lp), shaped, group_ids)
        t["train"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        self._sync_generator()
        t["sync"] = time.perf_counter() - t0

        metrics.update(out.metrics)
        metrics.update(
            {
                "step": self.step_idx,
                "reward/mean": float(rewards.mean()),
                "reward/clipo_mean": float(r_cl.mean()),
                "reward/shaped_mean": float(shaped.mean()),
                "response/mean_tokens": float(mask.sum(1).float().mean()),
                **{f"time/{k}": v for k, v in t.items()},
            }
        )
        emb = {
            "emb": out.embeddings,
            "correct": rewards.clone(),
            "group": group_ids,
            "step": self.step_idx,
        }
        self.embeddings.setdefault("start", emb)
        self.embeddings["end"] = emb
        self.history.append(metrics)
        self.step_idx += 1
        return metrics

    # ---- the policy's state in the TP = PP = 1 layout -----------------
    def full_policy_state(self) -> dict:
        """The policy in the TP = PP = 1 layout without `_extra_state` (collective when model-parallel)."""
        return self.layout.full_state(self.model.state_dict(), self.arch)

    def _sync_generator(self) -> None:
        full = self.full_policy_state()
        if self.gen is not None:
            self.gen.sync_from_megatron(full)

    # ---- checkpoint / resume ----------------------------------------
    def state_dict(self) -> dict:
        """Everything to resume, in the TP = PP = 1 layout (any layout resumes it); collective if model-parallel."""
        return {
            "step": self.step_idx,
            "policy": self.full_policy_state(),
            "optimizer": optim_state.full_optimizer_state(
                self.optimizer, self.model, self.arch, self.layout
            ),
            "head": self._head_state(),
            "history": self.history,
            "embeddings": self.embeddings,
            "torch_rng": torch.get_rng_state(),
            "config": to_dict(self.cfg),
        }

    def _head_state(self) -> dict:
        """The last stage's head trainer state, on every rank (collective with PP)."""
        state = self.layout.broadcast(self.head.state_dict() if self.head is not None else None)
        assert state is not None, "the last pipeline stage holds the head"
        return state

    def load_state_dict(self, state: dict) -> None:
        from clipo_megatron.models.hf_convert import load_megatron_state

        full = {k: v for k, v in state["policy"].items() if not k.endswith("_extra_state")}
        load_megatron_state(
            self.model, self.layout.local_state(self.model.state_dict(), full, self.arch)
        )
        self.optimizer.load_state_dict(
            optim_state.local_optimizer_state(
                self.optimizer, self.model, self.arch, self.layout, state["optimizer"]
            )
        )
        if self.head is not None:
            self.head.load_state_dict(state["head"])
        self.step_idx, self.history, self.embeddings = (
            state["step"],
            state["history"],
            state["embeddings"],
        )
        torch.set_rng_state(state["torch_rng"])
        self._sync_generator()

    def close(self) -> None:
        """Release the generator (its engine) and the verifier worker processes."""
        from clipo_megatron.verify.pool import shared_pool

        gen, self.gen = self.gen, None
        if gen is not None and hasattr(gen, "close"):
            gen.close()
        shared_pool().close()
