# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`Run`: everything one training run holds, and one RL step.

One RL step:
  generate (current weights) -> verify (math-verify) -> the objective's filter on the
  verifiable rewards (DAPO: drop zero-variance groups; NeMo-RL's placement, before the
  logprob pass) -> fused logprob pass on the Megatron policy, which also pools the
  response hidden states (and, with a KL term, the frozen reference policy's logprobs)
  -> head step (CLIPO loss, rewards from the pre-update loss) -> r' = r + r_CL -> group
  advantages -> policy update on the registry objective (`clipo.objective`) -> weight
  sync to the generator. CLIPO off (`clipo.head_runs` false) is the plain baseline: no
  head is built, trained or checkpointed and r' = r.
"""

from __future__ import annotations

import time

import torch

from clipo_megatron.core.advantages import group_advantages
from clipo_megatron.core.rewards import shaped_rewards
from clipo_megatron.megatron.clipo_step import clipo_step
from clipo_megatron.runner import optim_state
from clipo_megatron.runner.build import build_models
from clipo_megatron.runner.config import RunConfig, to_dict
from clipo_megatron.runner.layout import Layout
from clipo_megatron.runner.passes import (
    PolicyLoss,
    UpdateBatch,
    logprob_and_pool,
    pack,
    policy_update,
)
from clipo_megatron.runner.rollouts import sample_rollouts
from clipo_megatron.runner.step_metrics import clipo_diagnostics, reward_metrics

STAGES = ("generate", "verify", "logprob_embed", "head", "train", "sync")


class Run:
    """Everything one training run holds; `step()` does one RL step.

    With `parallel.tp` / `parallel.pp` > 1 (under torchrun) every rank holds its
    stage's TP shard of the policy; rank 0 alone generates and verifies
    (`self.gen` is None elsewhere). Whatever differs between layouts is asked of
    `self.layout` (`runner/layout.py`); the models come from `runner/build.py`.
    `state_dict()` is collective and returns the full (TP = PP = 1) layout.
    """

    def __init__(self, cfg: RunConfig):
        from clipo_megatron.runner.problems import load_problems

        cfg.validate()
        self.cfg, self.clipo = cfg, cfg.clipo
        # The data first: a file over its size caps is refused before the model loads.
        self.problems = load_problems(cfg.data, cfg.data.train_size, path=cfg.data.path)
        self.loss_fn = PolicyLoss(
            cfg.objective(), cfg.train.eps_low, cfg.train.eps_high, cfg.effective_kl_coef()
        )
        self.layout = Layout.init(cfg.parallel.tp, cfg.parallel.pp)
        self.tok, self.model, self.arch, self.ref_model, self.gen, self.optimizer, self.head = (
            build_models(cfg, self.layout, reference=self.loss_fn.kl_coef > 0)
        )
        self.step_idx = 0
        self.history: list[dict] = []
        self.embeddings: dict[str, dict] = {}

    # ---- one RL step -------------------------------------------------
    def _kept_rows(self, rewards: torch.Tensor, group_ids: torch.Tensor):
        """The objective's filter on the verifiable rewards, before the logprob pass, as NeMo-RL's
        grpo_train places DAPO's dynamic sampling: ([B] bool rows kept or None, metrics)."""
        kept = self.loss_fn.objective.filter_groups(rewards, group_ids)
        if kept is None:
            return None, {}
        return kept.keep, {
            "train/kept_rows": float(kept.keep.sum()),
            "train/dropped_groups": float(kept.num_dropped_groups),
        }

    def _update(self, batch: UpdateBatch) -> dict:
        """One policy update on the kept rows."""
        metrics = dict(
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
        # skipped: every group filtered (step()), or a non-finite loss / grad norm (passes.py)
        return {**metrics, "train/skipped_update": metrics["train/skipped_nonfinite"]}

    def step(self) -> dict:
        t = dict.fromkeys(STAGES, 0.0)
        batch, ro, rewards_all, verified = sample_rollouts(
            self.gen,
            self.problems,
            self.cfg.rollout,
            self.cfg.seed,
            self.step_idx,
            t,
            grader=self.cfg.clipo.grader,
        )
        ids, mask = pack(ro.prompt_ids, ro.response_ids, self.tok.pad_token_id)
        group_ids = torch.tensor([batch[i].index for i in ro.prompt_index])
        sample_ids = torch.arange(len(ro.texts)) + self.step_idx * len(ro.texts)
        keep, metrics = self._kept_rows(rewards_all, group_ids)
        rows = slice(None) if keep is None else keep  # [B] the rows past the filter
        r_cl_all = torch.zeros_like(rewards_all, dtype=torch.float32)  # [B] 0 on dropped rows
        out = None
        if keep is None or bool(keep.any()):
            kept = [x[rows] for x in (ids, mask, rewards_all, group_ids, sample_ids)]
            out = self._train_on(*kept, t=t, metrics=metrics)
            if out is not None:
                r_cl_all[rows] = out.rewards.cpu()
        else:
            metrics["train/skipped_update"] = 1.0  # every group filtered: no pass, no update

        t0 = time.perf_counter()
        self._sync_generator()
        t["sync"] = time.perf_counter() - t0

        metrics.update(out.metrics if out is not None else {})
        metrics.update(
            reward_metrics(self.step_idx, rewards_all, r_cl_all, mask, ro.response_ids, t, verified)
        )
        if out is not None:  # the head's embeddings (the baseline has none)
            emb = {
                "emb": out.embeddings,
                "correct": self.clipo.is_correct(rewards_all[rows]).float(),
                "group": group_ids[rows],
                "step": self.step_idx,
            }
            self.embeddings.setdefault("start", emb)
            self.embeddings["end"] = emb
        self.history.append(metrics)
        self.step_idx += 1
        return metrics

    def _train_on(self, ids, mask, rewards, group_ids, sample_ids, *, t: dict, metrics: dict):
        """Logprob pass, head step (CLIPO on), advantages and the policy update (after warm-up)
        on the kept rows [b]; returns the head step's result, None in the baseline."""
        cfg = self.cfg
        t0 = time.perf_counter()
        old_lp, pooled, empty, ref_lp = logprob_and_pool(
            self.model,
            ids,
            mask,
            cfg.train.micro_batch,
            self.ref_model,
            layout=self.layout,
            shared_prefix=cfg.train.shared_prefix,
        )
        t["logprob_embed"] = time.perf_counter() - t0

        out, r_cl = None, torch.zeros_like(rewards, dtype=torch.float32)  # [b]
        t0, correct = time.perf_counter(), self.clipo.is_correct(rewards)
        if self.clipo.head_runs:
            out = clipo_step(
                self.head,
                pooled if self.head is not None else None,
                correct,
                group_ids,
                sample_ids,
                step=self.step_idx,
                pp_group=self.layout.groups.pp,
                device=pooled.device,
                empty=empty,
            )
            r_cl = out.rewards.cpu()
        t["head"] = time.perf_counter() - t0

        adv = group_advantages(shaped_rewards(rewards, r_cl), group_ids)  # [b] on r' = r + r_CL
        if out is not None:  # did CLIPO change the update? A(r) beside A(r')
            metrics.update(clipo_diagnostics(rewards, r_cl, adv, correct, group_ids))
        t0 = time.perf_counter()
        if self.clipo.policy_updates_at(self.step_idx):
            metrics.update(self._update(UpdateBatch(ids, mask, old_lp, adv, ref_lp)))
        t["train"] = time.perf_counter() - t0
        return out

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

    def _head_state(self) -> dict | None:
        """The last stage's head trainer state, on every rank (collective with PP); None in the
        baseline, which has no head."""
        if not self.clipo.head_runs:
            return None
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
        # The config in force, not the saved state's: the optimiser would otherwise keep the old
        # lr while config.json shows the new one (a change needs --allow-config-change).
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.train.lr
            group["weight_decay"] = self.cfg.train.weight_decay
        if self.head is not None:  # a baseline run ignores a saved head (older checkpoints)
            if state.get("head") is None:
                raise ValueError(
                    "the checkpoint has no CLIPO head (saved with clipo.enabled=false): resume it "
                    "with clipo.enabled=false, or start CLIPO in a new output.dir"
                )
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
