# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The GPUs NeMo-RL trains on, counted as its `grpo.setup` counts them (every supported version).

`cluster.num_nodes * gpus_per_node` is the whole allocation; the training cluster is what is
left after the nodes (or, on one node, the GPUs) that `setup` hands elsewhere:

- a reward-model environment (`env.reward_model.resources`, when a data entry names
  `env_name: reward_model`): its nodes on a multi-node cluster, its GPUs on one node;
- non-colocated generation (`policy.generation.colocated.enabled: false`): its
  `colocated.resources.num_nodes` on a multi-node cluster, its `gpus_per_node` on one node.

Non-colocated OPD teachers (distillation) are not counted here: a GRPO recipe with them is
refused by NeMo-RL's own checks unless async.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clipo_megatron.nemo_rl.port.master_config import dotted_get

COLOCATED = "policy.generation.colocated."


@dataclass(frozen=True)
class TrainingCluster:
    gpus: int  # the GPUs NeMo-RL trains on
    total: int  # cluster.num_nodes * gpus_per_node
    how: str  # what is not training, for messages ("" when every GPU trains)

    def note(self) -> str:
        return f" ({self.how})" if self.how else ""


def _get(conf, key: str, default: Any = None) -> Any:
    return dotted_get(conf, key, default, none_is_default=True)


def _reward_model(conf) -> tuple[int, int]:
    """(nodes, gpus_per_node) of a reward-model environment the data sections use, else 0s."""
    names = set()
    for key in ("data.train", "data.validation", "data.default"):
        entries = _get(conf, key)
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, dict) and "env_name" in entry:
                names.add(entry["env_name"])
    if "reward_model" not in names:
        return 0, 0
    res = "env.reward_model.resources."
    return int(_get(conf, res + "num_nodes", 0)), int(_get(conf, res + "gpus_per_node", 0))


def training_cluster(conf) -> TrainingCluster | None:
    """The training GPUs of a resolved recipe (an OmegaConf config); None without cluster sizes."""
    nodes, gpn = _get(conf, "cluster.num_nodes"), _get(conf, "cluster.gpus_per_node")
    if nodes is None or gpn is None:
        return None
    nodes, gpn = int(nodes), int(gpn)
    rm_nodes, rm_gpn = _reward_model(conf)
    policy_nodes = nodes if nodes == 1 else nodes - rm_nodes
    taken = [f"reward model: {rm_nodes if nodes > 1 else rm_gpn}"] if rm_nodes or rm_gpn else []
    if bool(_get(conf, COLOCATED + "enabled", True)):
        per_node = gpn - rm_gpn if nodes == 1 else gpn
        return _cluster(policy_nodes, per_node, nodes, gpn, taken)
    gen_nodes = _get(conf, COLOCATED + "resources.num_nodes")
    gen_gpn = _get(conf, COLOCATED + "resources.gpus_per_node")
    if policy_nodes == 1:  # training and generation share the node
        per_node = gpn - int(gen_gpn or 0) - (rm_gpn if nodes == 1 else 0)
        taken.append(f"non-colocated generation: {int(gen_gpn or 0)} GPUs")
        return _cluster(1, per_node, nodes, gpn, taken)
    taken.append(f"non-colocated generation: {int(gen_nodes or 0)} nodes")
    return _cluster(policy_nodes - int(gen_nodes or 0), gpn, nodes, gpn, taken)


def _cluster(train_nodes: int, per_node: int, nodes: int, gpn: int, taken: list[str]):
    gpus = max(train_nodes, 0) * max(per_node, 0)
    if not taken:
        return TrainingCluster(gpus, nodes * gpn, "")
    return TrainingCluster(
        gpus,
        nodes * gpn,
        f"{gpus} train: {train_nodes} of {nodes} nodes x {per_node} GPUs; {', '.join(taken)}",
    )
