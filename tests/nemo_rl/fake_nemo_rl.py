# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A minimal NeMo-RL source tree with only the seams `clipo_megatron.nemo_rl.port.seams` checks.

Written into a test's tmp_path, so the seam checker (and `compat`, which runs it) is tested in
CI without NeMo-RL. The bodies are stubs; what matters is the shape the checker reads: the
signatures, the module-level names, the calls made by name. Names the product modules merely
import are stubbed from `seams.import_seams()`, so a new import does not need an edit here.
"""

from __future__ import annotations

from pathlib import Path

from clipo_megatron.nemo_rl.port import seams
from clipo_megatron.nemo_rl.port.seam_checks import STOCK_WORKER_FQN
from clipo_megatron.source_match.source import Source

FILES = {
    "models/policy/workers/megatron_policy_worker.py": """
from nemo_rl.models.megatron.data import get_microbatch_iterator


class MegatronPolicyWorkerImpl:
    def __init__(self, config, runtime_config):
        self.megatron_cfg = runtime_config.megatron_cfg
        self.model = None
        assert self.megatron_cfg.model is not None

    def get_logprobs(
        self,
        *,
        data,
        micro_batch_size=None,
        require_router_replay=True,
    ):
        (mb_iterator, n, mbs, seq, padded) = get_microbatch_iterator(data, {}, micro_batch_size)
        return self.model(mb_iterator)

    def train(self, data, loss_fn, eval_mode=False):
        return loss_fn(data)


class MegatronPolicyWorker(MegatronPolicyWorkerImpl):
    pass
""",
    "models/megatron/data.py": """
from dataclasses import dataclass


@dataclass
class ProcessedMicrobatch:
    data_dict: dict
    input_ids: object
    cu_seqlens_padded: object = None


def get_microbatch_iterator(data, cfg, mbs, straggler_timer=None):
    return iter([ProcessedMicrobatch(data, None)]), 1, mbs, 0, 0
""",
    "distributed/ray_actor_environment_registry.py": f'''
ACTOR_ENVIRONMENT_REGISTRY = {{"{STOCK_WORKER_FQN}": "mcore"}}


def get_actor_python_env(actor_class_fqn):
    return ACTOR_ENVIRONMENT_REGISTRY[actor_class_fqn]
''',
    "models/policy/utils.py": """
def get_runtime_env_for_policy_worker(policy_worker_name):
    return {}
""",
    "models/policy/lm_policy.py": """
class Policy:
    def __init__(self, cluster, config, tokenizer, weights_path=None,
                 worker_extension_cls_fqn=None):
        pass

    def run_all_workers_single_data(self, method_name, *args, **kwargs):
        return []

    def get_logprobs(self, data, timer=None):
        return data

    def train(self, data, loss_fn, eval_mode=False, gbs=None, mbs=None, timer=None):
        return {}

    def save_checkpoint(self, weights_path, optimizer_path=None, tokenizer_path=None):
        pass
""",
    "algorithms/grpo.py": """
class MasterConfig:
    def __init__(self, **config):
        self.config = config


def setup(master_config, tokenizer, dataset, val_dataset, policy_factory=None):
    policy = policy_factory(cluster=None, config=None, tokenizer=None, weights_path=None)
    policy_generation = nemo_gym_actor = dataloader = val_dataloader = loss_fn = None
    logger = checkpointer = grpo_save_state = train_cluster = inference_cluster = None
    teacher_worker_groups, alias_to_group_alias = {}, {}
    return (
        policy,
        policy_generation,
        nemo_gym_actor,
        (train_cluster, inference_cluster),
        dataloader,
        val_dataloader,
        loss_fn,
        logger,
        checkpointer,
        grpo_save_state,
        master_config,
        teacher_worker_groups,
        alias_to_group_alias,
    )


def _create_advantage_estimator(master_config):
    return None


def grpo_train(
    policy,
    policy_generation,
    wrapped_dataloader,
    val_dataloader,
    tokenizer,
    loss_fn,
    task_to_env,
    val_task_to_env,
    logger,
    checkpointer,
    grpo_save_state,
    master_config,
    processor=None,
):
    adv_estimator = _create_advantage_estimator(master_config)
    return adv_estimator.compute_advantage(prompt_ids=1, rewards=2, mask=3, repeated_batch=4)
""",
    "algorithms/advantage_estimator.py": """
class GRPOAdvantageEstimator:
    def compute_advantage(self, prompt_ids, rewards, mask, **kwargs):
        return rewards
""",
    "algorithms/loss/interfaces.py": """
import enum
from typing import Protocol


class LossType(enum.Enum):
    TOKEN_LEVEL = "token_level"
    SEQUENCE_LEVEL = "sequence_level"


class LossInputType(enum.Enum):
    LOGIT = "logit"
    LOGPROB = "logprob"


class LossFunction(Protocol):
    def __call__(self, data, global_valid_seqs, global_valid_toks, **kwargs): ...
""",
    "algorithms/loss/utils.py": """
def prepare_loss_input(logits, data, loss_fn):
    return {"next_token_logprobs": logits}, data
""",
}
NORMALIZER = "\n\nclass MetricNormalizer(enum.Enum):\n    TOKENS = 'tokens'\n"


def write_tree(pkg: Path, *, normalizer: bool = False) -> Path:
    """Write the seam files under `pkg` (a `nemo_rl/` directory), packages and import stubs."""
    for rel, text in FILES.items():
        extra = NORMALIZER if normalizer and rel.endswith("loss/interfaces.py") else ""
        _write(pkg / rel, text.lstrip() + extra)
    for seam in seams.import_seams():  # stub the names the product modules import elsewhere
        module, name = seam.name.removeprefix("import ").rsplit(".", 1)
        path = pkg.joinpath(*module.split(".")[1:])
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        sub = path.parent / name if path.name == "__init__.py" else path.with_suffix("") / name
        if (sub.with_suffix(".py")).is_file() or (sub / "__init__.py").is_file():
            continue
        rel = str(path.relative_to(pkg))
        if rel in FILES:  # written in full above: a name missing there is a moved seam
            continue
        text = path.read_text() if path.is_file() else ""
        if not path.is_file() or name not in Source(pkg).bindings(rel):
            _write(path, f"{text}{name} = None\n")
    for d in [pkg, *(p for p in pkg.rglob("*") if p.is_dir())]:
        init = d / "__init__.py"
        if not init.exists():
            init.write_text("")
    return pkg


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
