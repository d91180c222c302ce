# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The contrastive head's own optimisation and one CLIPO step on the last stage.

Per RL step: head forward on pooled hidden states (constants),
gather over DP so groups are complete, group contrastive loss, rewards from
the loss *before* the head update, then one full-batch AdamW step. The step
is skipped for a fixed head, and when the batch has no counted anchor (no
valid group): such a loss is a constant 0, and an AdamW step on it would still
decay the weights by 1 - lr * wd and advance the moments, moving the head on
no signal. It is skipped as well when the loss or a gradient is not finite (on any
rank holding the head: `clipo/head_skipped_nonfinite` is 1), so one NaN never
reaches the head's weights or AdamW moments. A skipped step leaves head and optimizer
state bit-identical; `steps_done` still advances and `clipo/head_updated` is 0.
The anchor count is that of the gathered batch, so every DP rank skips alike.
Warm-up (the first `warmup_steps` RL steps train the head alone) is the drivers' to apply,
through `ClipoBlock.policy_updates_at(step)`.

`state_dict()` holds head, optimizer and step count, so a resumed run continues
bit-for-bit (the authors' code re-initialises the optimizer). It holds no RNG
state: the step draws no random numbers (the InfoNCE positive is counter-based,
`core.sampling`), and the process-global RNG belongs to the driver (runner or
NeMo-RL), which saves and restores it once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from clipo_megatron.core.config import CLIPOConfig
from clipo_megatron.core.contrastive_loss import group_contrastive_loss
from clipo_megatron.core.groups import GroupIds, as_group_ids
from clipo_megatron.core.metrics import contrastive_metrics
from clipo_megatron.core.rewards import contrastive_rewards
from clipo_megatron.megatron.gather import all_reduce_grads, gather_rows
from clipo_megatron.megatron.parallel import group_size


@dataclass
class ClipoStepOutput:
    rewards: torch.Tensor  # [B_local] contrastive rewards of this rank's rollouts (detached)
    embeddings: torch.Tensor  # [B_local, d(/tp)] head outputs before the update (detached)
    positive_ids: torch.Tensor  # [B_local] sample id of each anchor's InfoNCE positive, -1 if none
    metrics: dict[str, float]


class HeadTrainer:
    """AdamW over the head and the CLIPO step."""

    def __init__(self, head: torch.nn.Module, cfg: CLIPOConfig, *, dp_group=None):
        self.head = head
        self.cfg = cfg
        self.dp_group = dp_group
        self.optimizer = torch.optim.AdamW(
            head.parameters(), lr=cfg.head_lr, weight_decay=cfg.head_weight_decay
        )
        self.steps_done = 0  # head steps due (not fixed head), skipped no-anchor steps included

    def step(
        self,
        pooled: torch.Tensor,
        correct: torch.Tensor,
        group_ids: GroupIds,
        sample_ids: torch.Tensor,
        *,
        step: int,
        empty: torch.Tensor | None = None,
    ) -> ClipoStepOutput:
        """One CLIPO step for this rank's rollouts.

        pooled [B_local, D] mean response hidden states; correct [B_local] binary
        rewards; group_ids / sample_ids [B_local] global ids (same on all ranks).
        empty [B_local] bool: rows that pooled no token (`MicrobatchPooler.empty_rows`); they
        leave the contrastive set (r_CL 0, their groups computed over the rest).
        group_ids may be any hashable ids (e.g. verl's str `uid`): they are mapped
        to ints over the ids of every DP rank, so all ranks agree (every rank must
        pass the same kind: tensors everywhere, or sequences everywhere).
        """
        dev = pooled.device  # every tensor of the step lives on the rows' device
        group_ids = self._int_group_ids(group_ids, device=dev).to(dev)  # [B_local]
        correct, sample_ids = correct.to(dev), sample_ids.to(dev)  # [B_local] each
        if empty is None:
            empty = torch.zeros(len(correct), dtype=torch.bool)
        member = ~empty.to(dev, torch.bool)  # [B_local]
        learn = not self.cfg.fixed_head
        self.head.train(learn)
        with torch.set_grad_enabled(learn):
            z = self.head(pooled.detach())  # [B_local, d(/tp)]
            res, mine, s_all = self._gathered_loss(
                z, correct, group_ids, sample_ids, member, step=step
            )
        r_all = contrastive_rewards(res, self.cfg)  # computed from the loss before the update
        metrics = contrastive_metrics(res, r_all)
        # No anchor in the whole (gathered) batch: no gradient and no decay either.
        update = learn and res.num_anchors > 0
        nonfinite = update and not self._update(res.loss, dev)
        if learn:
            self.steps_done += 1
        metrics["clipo/head_updated"] = float(update and not nonfinite)
        metrics["clipo/head_skipped_nonfinite"] = float(nonfinite)
        pidx = res.positive_index[mine]
        positive_ids = torch.where(pidx >= 0, s_all[pidx.clamp_min(0)], torch.full_like(pidx, -1))
        return ClipoStepOutput(
            rewards=r_all[mine].detach(),
            embeddings=z.detach(),
            positive_ids=positive_ids,
            metrics=metrics,
        )

    def _gathered_loss(self, z, correct, group_ids, sample_ids, member, *, step: int):
        """The group contrastive loss over every DP rank's rows -> (result, this rank's row
        indices in the gathered batch [B_local], the gathered sample ids [B])."""
        z_all, mine = gather_rows(z, dp_group=self.dp_group)
        c_all, _ = gather_rows(correct, dp_group=self.dp_group)
        g_all, _ = gather_rows(group_ids, dp_group=self.dp_group)
        s_all, _ = gather_rows(sample_ids, dp_group=self.dp_group)
        m_all, _ = gather_rows(member.long(), dp_group=self.dp_group)  # long: any backend
        local = torch.zeros(z_all.shape[0], dtype=torch.bool, device=z.device)
        local[mine] = True
        res = group_contrastive_loss(
            z_all,
            c_all,
            g_all,
            self.cfg,
            step=step,
            sample_ids=s_all,
            local_mask=local,
            sum_reduce=getattr(self.head, "sum_reduce", None),
            member=m_all.bool(),
        )
        return res, mine, s_all

    def _update(self, loss: torch.Tensor, dev) -> bool:
        """Backward, the DP all-reduce, and the AdamW step when the loss and every gradient are
        finite; else no step (head and moments untouched). Returns whether it stepped."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        all_reduce_grads(self.head, dp_group=self.dp_group)
        if not self._all_finite(loss, dev):  # a NaN / inf loss or gradient
            self.optimizer.zero_grad(set_to_none=True)
            return False
        self.optimizer.step()
        return True

    def _all_finite(self, loss: torch.Tensor, dev) -> bool:
        """Whether the loss and every gradient are finite on every rank that holds the head
        (DP replicas, and TP shards of a column-parallel head): all skip or all step."""
        ok = torch.isfinite(loss.detach()).all()
        for p in self.head.parameters():
            if p.grad is not None:
                ok = ok & torch.isfinite(p.grad).all()
        flag = ok.to(device=dev, dtype=torch.float32).reshape(1)  # [1]
        tp_group = (
            getattr(self.head, "tp_group", None)
            if getattr(self.head, "tensor_parallel", False)
            else None
        )
        for group in (self.dp_group, tp_group):
            if group_size(group) > 1:
                dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
        return bool(flag.item() > 0)

    def _int_group_ids(self, group_ids: GroupIds, *, device) -> torch.Tensor:
        """[B_local] ids -> long tensor; non-int ids are indexed over every DP rank's ids."""
        if isinstance(group_ids, torch.Tensor):
            return group_ids
        ids = group_ids.tolist() if hasattr(group_ids, "tolist") else list(group_ids)
        universe = ids
        if group_size(self.dp_group) > 1:
            parts: list = [None] * group_size(self.dp_group)
            dist.all_gather_object(parts, ids, group=self.dp_group)
            universe = [x for part in parts for x in part]
        return as_group_ids(ids, universe=universe, device=device)

    def state_dict(self) -> dict:
        return {
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "steps_done": self.steps_done,
        }

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps_done = int(state["steps_done"])
