# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Two mistakes in a user's overlay that the checks after them would misname.

- The CLIPO mixin listed before NeMo-RL's recipe in `defaults:`: the later parent wins, so the
  recipe's own settings undo CLIPO's (its leave-one-out baseline, for one), and the preflight
  would refuse the leave-one-out setting instead of naming the order.
- An overlay over a recipe of another algorithm (SFT, DPO, distillation, ...): the mixin's
  `max_group_size: ${grpo.num_generations_per_prompt}` fails to resolve, and the preflight would
  print that interpolation error instead of "not a GRPO recipe".

Each is one line naming the fix, reported before the recipe is resolved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clipo_megatron.nemo_rl.guard.recipes import CLIPO_PREFIX, load_recipe

OTHER_ALGORITHMS = {  # a top-level section -> the algorithm whose recipe it marks
    "sft": "an SFT recipe",
    "dpo": "a DPO recipe",
    "rm": "a reward-model recipe",
    "distillation": "a distillation recipe",
    "ppo": "a PPO recipe",
}


def _defaults(top: Any) -> list[str]:
    defaults = top.get("defaults") if isinstance(top, dict) else None
    entries = [defaults] if isinstance(defaults, str) else list(defaults or [])
    return [str(e) for e in entries]


def mixin_order_problem(recipe: str | Path, top: Any) -> str | None:
    """The CLIPO mixin is not the last entry of the overlay's `defaults:`."""
    names = _defaults(top)
    mixins = [i for i, n in enumerate(names) if n.startswith(CLIPO_PREFIX)]
    if not mixins or mixins[-1] == len(names) - 1:
        return None
    after = [n for i, n in enumerate(names) if i > mixins[-1] and not n.startswith(CLIPO_PREFIX)]
    fixed = ", ".join([n for n in names if not n.startswith(CLIPO_PREFIX)] + [names[mixins[-1]]])
    return (
        f"{recipe}: defaults: lists {names[mixins[-1]]} before {', '.join(after)}: a later parent "
        "overrides the earlier one, so the recipe would undo CLIPO's settings; list the CLIPO "
        f"mixin last: defaults: [{fixed}]"
    )


def not_grpo_problem(recipe: str | Path, raw: dict[str, Any]) -> str | None:
    """The merged (unresolved) recipe has no GRPO group size: a recipe of another algorithm."""
    if not isinstance(raw, dict) or "clipo" not in raw:  # not a CLIPO overlay: nothing to name
        return None
    grpo = raw.get("grpo")
    if isinstance(grpo, dict) and "num_generations_per_prompt" in grpo:
        return None
    kind = next(
        (name for key, name in OTHER_ALGORITHMS.items() if key in raw), "another algorithm's"
    )
    return (
        f"{recipe}: not a GRPO recipe ({kind}: no grpo.num_generations_per_prompt in its "
        "defaults chain); CLIPO runs inside NeMo-RL's GRPO: list a GRPO recipe first in "
        "defaults:, e.g. nemo_rl:examples/configs/recipes/llm/grpo-<model>-megatron.yaml"
    )


def overlay_mistake(recipe: str | Path, overrides: list[str] | None) -> str | None:
    """Either mistake above, or None; a recipe that does not load is left to the preflight's
    own line for it."""
    import yaml  # type: ignore[import-untyped]

    try:
        order = mixin_order_problem(recipe, yaml.safe_load(Path(recipe).read_text("utf-8")))
        return order or not_grpo_problem(recipe, load_recipe(recipe, overrides, resolve=False))
    except Exception:
        return None
