# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Two mistakes in a user's overlay that the checks after them would misname.

- The CLIPO mixin listed before NeMo-RL's recipe in `defaults:`: a later parent overrides an
  earlier one, so the recipe turns NeMo-RL's leave-one-out baseline back on and the preflight
  would refuse that key instead of naming the order.
- An overlay over a recipe of another algorithm (SFT, DPO, distillation, ...): the mixin's
  `max_group_size: ${grpo.num_generations_per_prompt}` fails to resolve, and the preflight would
  print that interpolation error instead of "not a GRPO recipe".

Each is one line naming the fix, reported before the recipe is resolved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clipo_megatron.nemo_rl.guard.recipes import CLIPO_PREFIX, NEMO_RL_PREFIX, load_recipe
from clipo_megatron.nemo_rl.recipe_keys import leave_one_out_key

OTHER_ALGORITHMS = {  # a top-level section of NeMo-RL's recipes -> the algorithm it marks
    "sft": "an SFT recipe",
    "dpo": "a DPO recipe",
    "rm": "a reward-model recipe",
    "distillation": "a distillation recipe",
    "ppo": "a PPO recipe",
}
A_GRPO_RECIPE = f"{NEMO_RL_PREFIX}examples/configs/grpo_math_1B_megatron.yaml"


def _defaults(top: Any) -> list[str]:
    defaults = top.get("defaults") if isinstance(top, dict) else None
    entries = [defaults] if isinstance(defaults, str) else list(defaults or [])
    return [str(e) for e in entries]


def _is_mixin(name: str) -> bool:
    return name.startswith(CLIPO_PREFIX)


def mixin_order_problem(recipe: str | Path, names: list[str], raw: dict[str, Any]) -> str | None:
    """The CLIPO mixin comes before a parent in `names` (the overlay's `defaults:`) and the merged
    recipe `raw` has the leave-one-out baseline on: the parent after the mixin turned it back on."""
    first = next((i for i, n in enumerate(names) if _is_mixin(n)), len(names))
    after = [n for n in names[first + 1 :] if not _is_mixin(n)]
    key = leave_one_out_key(raw) if after else None
    if key is None:
        return None
    fixed = [n for n in names if not _is_mixin(n)] + [n for n in names if _is_mixin(n)]
    return (
        f"{recipe}: defaults: lists {names[first]} before {', '.join(after)}, whose settings then "
        f"override the mixin's ({key}=true comes back); the mixin must come after the recipe: "
        f"defaults: [{', '.join(fixed)}]"
    )


def not_grpo_problem(recipe: str | Path, names: list[str], raw: dict[str, Any]) -> str | None:
    """The merged (unresolved) overlay `raw` has no GRPO group size: its recipe (the non-mixin
    entries of `names`) is one of another algorithm."""
    if "clipo" not in raw:  # not a CLIPO overlay: nothing to name
        return None
    grpo = raw.get("grpo")
    if isinstance(grpo, dict) and "num_generations_per_prompt" in grpo:
        return None
    kind = next((name for key, name in OTHER_ALGORITHMS.items() if key in raw), None)
    parents = [n for n in names if not _is_mixin(n)]
    what = ", ".join(parents) if parents else str(recipe)
    why = f"{kind}: " if kind else ""
    return (
        f"{recipe}: {what} is not a GRPO recipe ({why}no grpo.num_generations_per_prompt); CLIPO "
        f"runs inside NeMo-RL's GRPO: list a GRPO Megatron recipe before {CLIPO_PREFIX}clipo.yaml "
        f"in defaults:, e.g. {A_GRPO_RECIPE} (each one's verdict: docs/nemo_rl_recipes.md)"
    )


def overlay_mistake(recipe: str | Path, overrides: list[str] | None) -> str | None:
    """Either mistake above, or None; a recipe that does not load is left to the preflight's
    own line for it."""
    import yaml  # type: ignore[import-untyped]

    try:
        names = _defaults(yaml.safe_load(Path(recipe).read_text("utf-8")))
        raw = load_recipe(recipe, overrides, resolve=False)
    except Exception:
        return None
    if not isinstance(raw, dict):
        return None
    return mixin_order_problem(recipe, names, raw) or not_grpo_problem(recipe, names, raw)
