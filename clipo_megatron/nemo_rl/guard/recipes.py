# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Loading a NeMo-RL recipe: its `defaults:` chain, NeMo-RL's resolvers, dotted overrides.

Recipes are YAML with NeMo-RL's conventions: `defaults:` names a parent
recipe (path relative to the file, a string or a list; `nemo_rl:<path>` is a
recipe of the NeMo-RL checkout, merged when NeMo-RL is found and skipped
otherwise; `clipo_megatron:<file>` a mixin shipped in this package), children override
parents, OmegaConf interpolation (`${policy.model_name}`, `${mul:a,b}`), and
dotted command-line overrides (`grpo.max_num_steps=10`).

Apart from `nemo_rl/config.py` (what the merged config must satisfy) because loading needs
only omegaconf and the file system, never the `clipo:` rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _register_resolvers() -> None:
    """NeMo-RL's arithmetic resolvers, registered as its `register_omegaconf_resolvers` does.

    On omegaconf 2.3 (NeMo-RL's lock) only `register_new_resolver` resolves nested `${mul:${a},
    ${b}}`; 2.3's `register_resolver` is the legacy API that rejects them (2.4 renamed the new
    API to `register_resolver`). The `has_resolver` guard lets NeMo-RL's registration and ours
    run in one process in either order."""
    import omegaconf
    from omegaconf import OmegaConf

    new_api = tuple(int(x) for x in omegaconf.__version__.split(".")[:2]) >= (2, 4)
    register = OmegaConf.register_resolver if new_api else OmegaConf.register_new_resolver
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            register(name, fn)


def _clipo_data(data_dir: str, name: str) -> str:
    """`${clipo_data:<data dir>,<dataset>}`: the authors' file of a dataset under the data dir,
    under whichever accepted name it has there (published first: `data/registry.py`)."""
    from clipo_megatron.data.loader import verl_path

    return str(verl_path(name, data_dir))


RESOLVERS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": lambda a, b: max(a, b),
    "clipo_data": _clipo_data,  # ours: the data files' accepted names
}


def _load_with_defaults(
    path: Path,
    seen: tuple[Path, ...] = (),
    skipped: list | None = None,
    files: list | None = None,
    named: str = "",
):
    """The recipe merged over its parents; each `nemo_rl:` parent skipped for want of NeMo-RL
    goes into `skipped` as (recipe, parent); each file read goes into `files` as (path, how its
    child named it: "" for the recipe itself), in merge order (parents before their child)."""
    from omegaconf import DictConfig, OmegaConf

    path = path.resolve()
    if path in seen:
        raise ValueError(f"recipe `defaults:` cycle: {' -> '.join(str(p) for p in (*seen, path))}")
    if not path.exists():
        raise ValueError(
            f"recipe {path} does not exist (named by {seen[-1] if seen else 'the caller'})"
        )
    node = OmegaConf.load(path)
    assert isinstance(node, DictConfig), f"recipe {path} must be a mapping"
    parents = node.pop("defaults", None)
    if parents is None:
        if files is not None:
            files.append((path, named))
        return node
    if isinstance(parents, str):
        parents = [parents]
    merged: Any = OmegaConf.create({})
    for parent in parents:
        parent = str(parent)
        if parent.startswith(NEMO_RL_PREFIX):
            root = nemo_rl_root()
            if root is None:  # CI / no NeMo-RL: our recipes set every key they interpolate
                if skipped is not None:
                    skipped.append((path, parent))
                continue
            parent_path = root / parent[len(NEMO_RL_PREFIX) :]
            if not parent_path.is_file():
                raise ParentNotFound(
                    f"{path}: its `defaults:` parent {parent} is not in NeMo-RL's checkout at "
                    f"{root} ({parent_path} does not exist); point NEMO_RL_ROOT at the NeMo-RL "
                    "checkout (the folder holding examples/configs) or fix the parent's path"
                )
        elif parent.startswith(CLIPO_PREFIX):  # a mixin shipped in the package
            parent_path = CLIPO_CONFIGS / parent[len(CLIPO_PREFIX) :]
        else:
            parent_path = path.parent / parent
        merged = _merge(
            merged, _load_with_defaults(parent_path, (*seen, path), skipped, files, parent)
        )
    if files is not None:
        files.append((path, named))
    return _merge(merged, node)


def _merge(base: Any, child: Any) -> Any:
    """OmegaConf.merge, except that a list in the child replaces a mapping in the parent (and
    the other way round) instead of failing: `data.validation` is one set (a mapping) in a
    parent recipe and a list of sets in a child (examples/configs/reproduce/)."""
    from omegaconf import OmegaConf

    b = OmegaConf.to_container(base, resolve=False)
    _drop_replaced(b, OmegaConf.to_container(child, resolve=False))
    return OmegaConf.merge(OmegaConf.create(b), child)


def _drop_replaced(base: Any, child: Any) -> None:
    """Delete from `base` every key whose value the child gives as the other container kind."""
    if not (isinstance(base, dict) and isinstance(child, dict)):
        return
    for key, c in child.items():
        b = base.get(key)
        if isinstance(b, dict) and isinstance(c, dict):
            _drop_replaced(b, c)
        elif (isinstance(b, dict) and isinstance(c, list)) or (
            isinstance(b, list) and isinstance(c, dict)
        ):
            del base[key]


NEMO_RL_PREFIX = "nemo_rl:"
# `clipo_megatron:clipo.yaml` in `defaults:` is the mixin that turns CLIPO on over any NeMo-RL
# recipe (clipo_megatron/configs/clipo.yaml, shipped in the wheel).
CLIPO_PREFIX = "clipo_megatron:"
CLIPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


# The sections of NeMo-RL's GRPO MasterConfig: a recipe that sets them all runs without its
# `nemo_rl:` parent (examples/configs/clipo_base.yaml); one that lacks any needs the parent.
MASTER_SECTIONS = ("grpo", "loss_fn", "policy", "data", "env", "logger", "cluster", "checkpointing")


class ParentNotFound(ValueError):
    """A recipe's `nemo_rl:` parent could not be found and the recipe needs it (one line)."""


class BadOverride(ValueError):
    """A dotted override that is malformed or names a key the recipe lacks (one line)."""


def _check_skipped(cfg: Any, skipped: list) -> None:
    """ParentNotFound when a `nemo_rl:` parent was skipped and the merged recipe lacks a
    MasterConfig section: said before any key resolves (else the first error names a key that
    the parent would have set, not the parent)."""
    lacking = [s for s in MASTER_SECTIONS if s not in cfg]
    if not skipped or not lacking:
        return
    recipe, parent = skipped[0]
    raise ParentNotFound(
        f"{recipe}: its `defaults:` parent {parent} was not found (NEMO_RL_ROOT is unset and no "
        f"installed NeMo-RL has examples/configs), and the recipe does not set {', '.join(lacking)} "
        "itself; export NEMO_RL_ROOT=<your NeMo-RL checkout> (the folder holding examples/configs)"
    )


def nemo_rl_root() -> Path | None:
    """NeMo-RL's checkout (for `defaults: nemo_rl:examples/configs/...`): $NEMO_RL_ROOT, else the installed package's."""
    import importlib.util
    import os

    env = os.environ.get("NEMO_RL_ROOT")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("nemo_rl")
    if spec is None or not spec.origin:
        return None
    root = Path(spec.origin).parent.parent
    return root if (root / "examples" / "configs").is_dir() else None


def load_recipe(
    path: str | Path,
    overrides: list[str] | None = None,
    *,
    resolve: bool = True,
    files: list | None = None,
) -> dict[str, Any]:
    """Load a recipe with its `defaults:` chain and dotted overrides; return a plain dict.

    A dotted override of a key absent from the recipe is an error (a typo
    would otherwise be silently ignored); prefix it with `+` to add a key.
    `files`, when given, receives (path, name in its child's `defaults:`) for every file of the
    chain, parents before their child (the recipe last, named "").
    """
    from omegaconf import OmegaConf

    _register_resolvers()
    skipped: list = []
    cfg = _load_with_defaults(Path(path), skipped=skipped, files=files)
    _check_skipped(cfg, skipped)
    for ov in overrides or []:
        if "=" not in ov:
            raise BadOverride(f"override {ov!r} must look like key.path=value")
        key, _ = ov.split("=", 1)
        add = key.startswith("+")
        key = key.lstrip("+")
        if not add and OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
            raise BadOverride(_missing_override_line(cfg, ov, key))
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([ov.lstrip("+")]))
    return OmegaConf.to_container(cfg, resolve=resolve)  # type: ignore[return-value]


def _missing_override_line(cfg: Any, override: str, key: str) -> str:
    """A dotted override of a key the recipe lacks: the key it most likely misspells, else how to
    add a new one."""
    from omegaconf import OmegaConf

    from clipo_megatron.core.key_names import closest

    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    siblings = [str(k) for k in node.keys()] if OmegaConf.is_dict(node) else []
    guess = closest(leaf, siblings)
    if guess:
        meant = f"{parent}.{guess}" if parent else guess
        return (
            f"override {override}: {key} is not in the recipe; did you mean {meant}? "
            f"(+{override} would add it as a new key)"
        )
    return f"override {override}: {key} is not in the recipe; write +{override} to add it"
