# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""AdamW state keyed by full parameter name, so a checkpoint saved at one TP / PP layout
resumes at any other (torch keys optimizer state by parameter index, which differs per layout)."""

from __future__ import annotations

import torch


def _per_tensor(fn):
    """Apply a per-tensor layout function (`shard`, `gather_tensor`) to an optimizer state entry's tensors."""
    return lambda name, state, *args: {
        k: fn(name, v, *args) if torch.is_tensor(v) and v.dim() else v for k, v in state.items()
    }


def _param_names(model) -> list[str]:
    return [n for n, _ in model.named_parameters()]  # the optimizer's param order


def full_optimizer_state(optimizer, model, arch, layout) -> dict:
    """AdamW state in the TP = PP = 1 layout, keyed by full parameter name; collective when
    model-parallel (`layout`: the run's `runner.layout.Layout`)."""
    from clipo_megatron.runner.model.tp_state import gather_tensor

    sd = optimizer.state_dict()
    names = _param_names(model)
    by_name = {names[i]: st for i, st in sd["state"].items()}
    by_name = layout.full_state(by_name, arch, gather_value=_per_tensor(gather_tensor))
    return {"state_by_name": by_name, "param_groups": sd["param_groups"]}


def local_optimizer_state(optimizer, model, arch, layout, full: dict) -> dict:
    """`full_optimizer_state`'s output as this rank's `optimizer.load_state_dict` input."""
    if "state_by_name" not in full:
        raise ValueError(
            "checkpoint optimizer state predates name-keyed checkpoints; start a new output.dir"
        )
    from clipo_megatron.runner.model.tp_state import shard

    names = _param_names(model)
    by_name = layout.local_state(names, full["state_by_name"], arch, shard_value=_per_tensor(shard))
    state = {i: by_name[n] for i, n in enumerate(names) if n in by_name}
    # This layout's param indices, the saved hyperparameters.
    groups = optimizer.state_dict()["param_groups"]
    saved = {k: v for k, v in full["param_groups"][0].items() if k != "params"}
    return {"state": state, "param_groups": [{**g, **saved} for g in groups]}
