# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner's parallel layout (TP x PP), chosen once: everything that differs between layouts.

`Layout.init(tp, pp)` starts the process groups and answers, for the passes and `Run`:
- the groups (`groups.tp` / `groups.pp`; None along an unsplit dimension; no DP in the runner);
- log p(target) of a logits tensor: plain, or vocab-parallel over the TP shard;
- the grad-norm clip: torch's, or the global norm over TP shards and PP stages;
- the schedule: how a list of micro-batches runs forward-only or forward-backward. One stage:
  a plain loop. Several: Megatron-Core's `get_forward_backward_func()` (1F1B, p2p between
  stages, uniform micro-batch shapes). The loss functions' dicts come back on the last stage,
  and `broadcast` takes whatever the last stage made from them to every stage;
- the state in the TP = PP = 1 layout (checkpoints, the generator sync) and back.

A layout is one `Layout` value: the passes (`runner/passes.py`) and `Run` never test tp / pp.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from clipo_megatron.megatron import parallel as mp
from clipo_megatron.megatron.gather import broadcast_from_last_stage
from clipo_megatron.megatron.parallel import ParallelGroups
from clipo_megatron.runner import parallel, pipeline
from clipo_megatron.runner.micro_batches import micro_batches, seq_length
from clipo_megatron.runner.model.policy_passes import target_logprobs

# forward_step(data_iterator, model) -> (model output, loss_func); loss_func(output) ->
# (this micro-batch's share of the batch loss [], info dict), the Megatron-Core contract.
ForwardStep = Callable[[Iterator, torch.nn.Module], tuple]


@dataclass(frozen=True)
class Layout:
    """TP x PP of this run and the functions that depend on it (module doc)."""

    tp: int = 1
    pp: int = 1
    groups: ParallelGroups = field(default_factory=ParallelGroups)

    @classmethod
    def init(cls, tp: int = 1, pp: int = 1) -> Layout:
        """Start torch.distributed and Megatron's groups for TP x PP (collective), and the layout."""
        parallel.init_distributed(tp, pp)
        return cls(
            tp,
            pp,
            ParallelGroups(
                tp=parallel.tp_group() if tp > 1 else None,
                pp=parallel.pipeline_group() if pp > 1 else None,
            ),
        )

    @property
    def model_parallel(self) -> bool:
        """The policy is split over ranks (its state must be gathered; rank 0 alone generates)."""
        return self.tp > 1 or self.pp > 1

    @property
    def pipelined(self) -> bool:
        return self.pp > 1

    @property
    def is_last_stage(self) -> bool:
        """This rank holds the logits, the final norm (pooled states) and the CLIPO head."""
        return not self.pipelined or mp.is_pipeline_last_stage()

    # ---- the passes' building blocks ---------------------------------
    def target_logprobs(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """[..., V(/tp)] logits, [...] targets -> [...] log p(target), differentiable."""
        if self.tp > 1:
            return parallel.vocab_parallel_target_logprobs(logits, targets)
        return target_logprobs(logits, targets)

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor:
        """Clip to the global grad norm (every shard and stage counted once); returns the norm."""
        if self.model_parallel:
            return parallel.clip_grad_norm_model_parallel(params, max_norm)
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def micro_batches(self, ids, mask, micro_batch: int, *, shared_prefix: bool) -> list[dict]:
        """The batch's micro-batches; of one shape when pipelined (the p2p buffers are fixed)."""
        return micro_batches(
            ids, mask, micro_batch, shared_prefix=shared_prefix, uniform=self.pipelined
        )

    def schedule(
        self,
        model,
        micro: list[dict],
        forward_step: ForwardStep,
        *,
        forward_only: bool,
        data: Iterator | None = None,
    ) -> list[dict]:
        """Run every micro-batch (read through `data`, e.g. the pooler's tee, else `micro` in order);
        backward after each loss unless `forward_only`. The loss functions' info dicts, in
        micro-batch order, on the last stage ([] elsewhere)."""
        data = iter(micro) if data is None else data
        if self.pipelined:
            return _megatron_schedule(model, micro, forward_step, forward_only, data)
        outs = []
        for _ in micro:
            out, loss_func = forward_step(data, model)
            loss, info = loss_func(out)
            if not forward_only:
                loss.backward()
            outs.append(info)
        return outs

    def finish_grads(self, model) -> None:
        """Gradients complete after the schedule: tied embeddings summed over first and last stage."""
        if self.pipelined:
            pipeline.allreduce_tied_embedding_grads(model)

    def broadcast(self, obj):
        """The last stage's `obj` (picklable) on every stage; identity with one stage."""
        return broadcast_from_last_stage(obj, pp_group=self.groups.pp)

    # ---- state in the TP = PP = 1 layout -----------------------------
    def full_state(self, named: dict, arch, gather_value=None) -> dict:
        """{local name: value} -> {full name: full value} without `_extra_state` (collective
        when model-parallel; `gather_value` as `pipeline.full_from_local`'s)."""
        if not self.model_parallel:
            return {k: v for k, v in named.items() if not k.endswith("_extra_state")}
        return pipeline.full_from_local(named, arch, self.groups.tp, gather_value)

    def local_state(self, names, full: dict, arch, shard_value=None) -> dict:
        """This rank's {local name: value} from a full dict (`pipeline.local_from_full`)."""
        return pipeline.local_from_full(names, full, arch, shard_value)


def _megatron_schedule(model, micro, forward_step, forward_only: bool, data) -> list[dict]:
    """Megatron-Core's pipeline schedule. It divides each loss by the number of micro-batches
    (its losses are means over micro-batches); ours already sum to the batch loss, so the
    loss is scaled back up here (the `num_microbatches` correction of NeMo-RL's loss)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    n = len(micro)

    def step(it, m):
        out, loss_func = forward_step(it, m)

        def scaled(output):
            loss, info = loss_func(output)
            return loss * n, info

        return out, scaled

    return get_forward_backward_func()(
        forward_step_func=step,
        data_iterator=data,
        model=[model],
        num_microbatches=n,
        seq_length=seq_length(micro),
        micro_batch_size=micro[0]["ids"].shape[0],
        forward_only=forward_only,
    )
