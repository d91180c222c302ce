# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Preflight: everything that can be known about a run before the cluster is spent on it.

`examples/run_grpo_clipo.py --validate-only` (and the driver, before Ray starts) calls
`preflight(recipe, overrides)`. It collects every problem instead of stopping at the first, so
one edit round fixes a recipe; each problem is one line naming the key, what is wrong and the fix.
It runs in seconds on a laptop, with or without NeMo-RL importable:

1. the recipe merges and resolves (`load_recipe`, incl. NeMo-RL's parent recipe when found);
2. the loop NeMo-RL would run the recipe with is one CLIPO's driver runs, and an async recipe
   one NeMo-RL's async path runs (`nemo_rl/port/loops.py`);
   the `clipo:` block and its cross-field rules (`validate_master_config`), incl. settings
   under which CLIPO's capture never runs (force_on_policy_ratio, training CUDA graphs, MTP
   with an empty last pipeline stage);
3. with NeMo-RL importable: the supported version (`compat.check_supported`), the seams the
   extension uses in its source (`seams`, one line per moved seam) and NeMo-RL's own
   pydantic `MasterConfig` of `nemo_rl.algorithms.grpo`;
4. data files exist with the columns their dataset class reads; no training row is validated
   on (`preflight_data`);
5. parallel sizes fit the model and NeMo-RL's padding / batch rules (`preflight_parallel`), and
   the checkpoint NeMo-RL would resume from was saved at a layout Bridge can load (`resume_layout`);
6. unless `cluster_env=False` (laptops, CI): the environment the cluster run needs;
7. with `clipo.drop_overlong_prompts`, how many training prompts the run drops
   (`prompt_filter`, `Report.prompt_filter`: part of the OK line).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clipo_megatron.nemo_rl.config import (
    ClipoNemoRLConfig,
    interpolated_keys,
    knob_problems,
    validate_master_config,
)
from clipo_megatron.nemo_rl.guard.families import not_run
from clipo_megatron.nemo_rl.guard.preflight_data import (
    check_files,
    check_overlap,
    split_beside_validation,
)
from clipo_megatron.nemo_rl.guard.preflight_parallel import check_parallel
from clipo_megatron.nemo_rl.guard.preflight_resume import check_resume_clipo
from clipo_megatron.nemo_rl.guard.recipe_mistakes import overlay_mistake
from clipo_megatron.nemo_rl.guard.recipes import (
    NEMO_RL_PREFIX,
    BadOverride,
    ParentNotFound,
    load_recipe,
    nemo_rl_root,
)
from clipo_megatron.nemo_rl.port.loops import loop_of, loop_problems
from clipo_megatron.nemo_rl.port.run_grpo import config_problems
from clipo_megatron.nemo_rl.resume_layout import check_resume_layout


@dataclass
class Report:
    config: dict[str, Any] | None = None
    clipo: ClipoNemoRLConfig | None = None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    prompt_filter: str | None = None  # "dropped N of M prompts over L tokens", when filtering
    not_run: list[str] = field(default_factory=list)  # families / features CLIPO has not run with
    skipped: str | None = None  # NeMo-RL's own checks, when they could not run here (and why)

    @property
    def ok(self) -> bool:
        return not self.problems

    def format(self, recipe: str | Path) -> str:
        lines = [f"warning: {w}" for w in self.warnings]
        if self.problems:
            lines.append(f"preflight: {len(self.problems)} problem(s) in {recipe}:")
            lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


SKIPPED_WITHOUT_NEMO_RL = (
    "NeMo-RL's own checks did not run (its version, the seams, the loop's seams, its "
    "MasterConfig: NeMo-RL is not importable here); run them all with "
    "`NEMO_RL_SRC=<NeMo-RL checkout> bash scripts/test_nemo_rl.sh --preflight --config <recipe>`"
)


def nemo_rl_importable() -> bool:
    return importlib.util.find_spec("nemo_rl") is not None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def check_nemo_rl(config: dict[str, Any]) -> list[str]:
    """The installed NeMo-RL is supported, its seams are in place (one line per moved seam), and
    it accepts the config (its pydantic MasterConfig)."""
    from clipo_megatron.nemo_rl.port.compat import (
        SeamsMovedError,
        UnsupportedNemoRLError,
        check_supported,
    )

    try:  # the seams of the loop the recipe runs, the other loops' left alone
        check_supported(loop_of(config).name)
    except SeamsMovedError as e:
        return [f"NeMo-RL: {line}" for line in e.lines]
    except UnsupportedNemoRLError as e:
        return [f"NeMo-RL: {_one_line(e)}"]
    return config_problems(config)  # NeMo-RL's MasterConfig over the recipe


def check_cluster_env(config: dict[str, Any], *, has_nemo_rl: bool) -> tuple[list, list]:
    """Environment the cluster path reads (NeMo-RL raises on some of it only after Ray is up)."""
    problems: list[str] = []
    warnings: list[str] = []
    if not has_nemo_rl:
        problems.append(
            "NeMo-RL is not importable: the run needs it; put its checkout on PYTHONPATH and set "
            "NEMO_RL_ROOT (or pass --no-cluster-env to check the recipe only)"
        )
    elif nemo_rl_root() is None:
        problems.append(
            f"NEMO_RL_ROOT is unset and NeMo-RL has no examples/configs: the recipe's "
            f"`{NEMO_RL_PREFIX}` parent was skipped; export NEMO_RL_ROOT=<NeMo-RL checkout>"
        )
    megatron = ((config.get("policy") or {}).get("megatron_cfg") or {}).get("enabled")
    if megatron and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        problems.append(
            "TORCH_CUDA_ARCH_LIST is not set: NeMo-RL's Megatron backend refuses to start "
            "without it; export TORCH_CUDA_ARCH_LIST='9.0' (H100; '9.0 10.0' for H100+B200)"
        )
    if not os.environ.get("CLIPO_DATA_DIR"):
        warnings.append(
            "CLIPO_DATA_DIR is unset: the recipes' data paths fall back to data/clipo under the "
            "working directory; export CLIPO_DATA_DIR=<parquet root with train/ and test/>"
        )
    model = str((config.get("policy") or {}).get("model_name", ""))
    if not Path(model).expanduser().is_dir() and not os.environ.get("HF_HOME"):
        warnings.append(
            f"HF_HOME is unset and policy.model_name={model!r} is not a local path: each node "
            "downloads it to ~/.cache/huggingface; export HF_HOME=<shared filesystem cache>"
        )
    return problems, warnings


def preflight(
    recipe: str | Path, overrides: list[str] | None = None, *, cluster_env: bool = True
) -> Report:
    """Run every check on a recipe; never raises for a user error (see `Report.problems`)."""
    report = Report()
    wrong = _wrong_command(recipe)
    if wrong:
        report.problems.append(wrong)
        return report
    mistake = overlay_mistake(recipe, overrides)
    if mistake:
        report.problems.append(mistake)
        return report
    try:
        config = load_recipe(recipe, overrides)
        derived = interpolated_keys(load_recipe(recipe, overrides, resolve=False))
    except Exception as e:  # YAML, interpolation, override errors: all user errors
        report.problems.append(_load_problem(recipe, e))
        return report
    return preflight_config(config, cluster_env=cluster_env, derived=derived)


def _load_problem(recipe: str | Path, e: Exception) -> str:
    """The one line for a recipe that does not load; a `${oc.env:VAR}` whose variable is unset
    (NeMo Gym recipes read $HF_HOME) names the key and the variable."""
    import re

    if isinstance(e, ParentNotFound | BadOverride):  # already one line naming the fix
        return str(e)
    unset = re.search(r"Environment variable '([^']+)' not found", str(e))
    if unset:
        key = getattr(e, "full_key", None) or "a key"
        var = unset.group(1)
        return (
            f"{key} reads the environment variable {var} (${{oc.env:{var}}}), which is unset "
            f"here; export {var}=<its value on the cluster> before the preflight and the run"
        )
    return f"--config {recipe}: {type(e).__name__}: {_one_line(e)}"


def _wrong_command(recipe: str | Path) -> str | None:
    """A runner recipe given to the NeMo-RL driver: which command runs it (one line)."""
    import yaml  # type: ignore[import-untyped]

    from clipo_megatron.recipe_kind import wrong_command

    try:
        top = yaml.safe_load(Path(recipe).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # load_recipe names these
    if not isinstance(top, dict):
        return None
    return wrong_command(recipe, top, "nemo_rl", "examples/run_grpo_clipo.py")


def preflight_config(
    config: dict[str, Any], *, cluster_env: bool = True, derived: frozenset[str] = frozenset()
) -> Report:
    """The checks on an already merged and resolved master config (a `load_recipe` dict);
    `derived`: keys set by interpolation, named at their source (`interpolated_keys`)."""
    report = Report(config=config)
    has_nemo_rl = nemo_rl_importable()
    data = config.get("data") or {}
    ranges = knob_problems(
        config, derived
    )  # every key out of range, each named as the user wrote it
    checks: list[tuple[str, Callable[[], tuple[list[str], list[str]]]]] = [
        ("value ranges", lambda: (ranges, [])),
        ("NeMo-RL loop", lambda: (loop_problems(config), [])),
        ("clipo / cross-field rules", lambda: ([p for p in [_clipo(report, config)] if p], [])),
        ("NeMo-RL", lambda: (check_nemo_rl(config) if has_nemo_rl else [], [])),
        ("data files", lambda: check_files(data)),
        (
            "train / validation overlap",
            lambda: (check_overlap(data), split_beside_validation(data)),
        ),
        ("resume: CLIPO's files", lambda: check_resume_clipo(config)),
    ]
    if not ranges:  # the sizes' arithmetic needs sizes: "cannot check" lines said nothing more
        checks.append(("parallel sizes", lambda: check_parallel(config)))
        checks.append(("resume layout", lambda: check_resume_layout(config)))
    if cluster_env:
        checks.append(("cluster env", lambda: check_cluster_env(config, has_nemo_rl=has_nemo_rl)))
    for name, check in checks:
        try:
            problems, warnings = check()
        except Exception as e:  # a value of the wrong type: name it, keep checking the rest
            problems, warnings = [f"{name}: cannot check ({type(e).__name__}: {_one_line(e)})"], []
        report.problems += [p for p in problems if p and p not in report.problems]
        report.warnings += warnings
    if report.ok:  # accepted is not "has run": say what CLIPO has not run with (guard.families)
        report.not_run = not_run(config)
        if not has_nemo_rl:
            report.skipped = SKIPPED_WITHOUT_NEMO_RL
    if report.ok and report.clipo is not None and report.clipo.drop_overlong_prompts:
        from clipo_megatron.nemo_rl.guard.prompt_count import preflight_line

        try:
            report.prompt_filter = preflight_line(config)
        except Exception as e:  # a file or processor it cannot read: name it
            report.problems.append(f"clipo.drop_overlong_prompts: cannot count ({_one_line(e)})")
    return report


def _clipo(report: Report, config: dict[str, Any]) -> str | None:
    try:
        report.clipo = validate_master_config(config)
    except ValueError as e:
        return _one_line(e)
    if report.clipo.grader == "paper" and importlib.util.find_spec("pylatexenc") is None:
        return (
            "clipo.grader=paper needs pylatexenc (the authors' checker's LaTeX converter), which "
            "is not installed; pip install 'pylatexenc>=2.10,<3' (a dependency of this package)"
        )
    return None
