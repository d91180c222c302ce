# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron` command line: `train`, `compare` and `eval`.

Each subcommand lives in its own module exposing `main(argv) -> int`; they are
imported lazily so `clipo-megatron eval --help` does not pay for Megatron.
"""

from __future__ import annotations

import importlib
import sys

_SUBCOMMANDS = {
    "train": (
        "clipo_megatron.runner.train",
        "GRPO / DAPO / GSPO / GMPO, with or without CLIPO, on one machine (YAML + dotted overrides)",
    ),
    "compare": (
        "clipo_megatron.runner.compare",
        "objectives x {CLIPO, baseline} x seeds: one table with 95 % intervals, plots (resumable)",
    ),
    "eval": (
        "clipo_megatron.eval.run",
        "pass@1 over a benchmark suite or datasets; --run DIR / --config: a training run's held-out task",
    ),
}
# `eval --run DIR` / `eval --config` evaluate the runner's own task with the runner's `Run`:
# routed here, above both packages, so that eval never imports the runner.
_RUNNER_HELDOUT = "clipo_megatron.runner.heldout"


def _module_for(argv: list[str]) -> str:
    if argv[0] == "eval":
        rest = set(argv[1:])
        if rest & {"--run", "--config"} and not rest & {
            "--suite",
            "--datasets",
            "compare",
            "paper",
        }:
            return _RUNNER_HELDOUT
    return _SUBCOMMANDS[argv[0]][0]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in _SUBCOMMANDS:
        lines = [f"usage: clipo-megatron {{{','.join(_SUBCOMMANDS)}}} [args]", ""]
        lines += [f"  {name:8s} {desc}" for name, (_, desc) in _SUBCOMMANDS.items()]
        print("\n".join(lines))
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown subcommand {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    try:  # a broken YAML recipe or override: one line naming it, exit 2, no traceback
        check_yaml_inputs(argv[1:], argv[0])
    except ValueError as e:
        print(f"clipo-megatron {argv[0]}: error: {e}", file=sys.stderr)
        return 2
    module = importlib.import_module(_module_for(argv))
    return int(module.main(argv[1:]) or 0)


def check_yaml_inputs(args: list[str], command: str = "train") -> None:
    """ValueError (one line) if a `--config` recipe or a `key=value` override is not YAML, or
    the recipe is not a mapping: yaml's own error is a 33-line traceback ending in a mark.
    A missing recipe file is left to the subcommand, which names it."""
    from pathlib import Path

    import yaml  # type: ignore[import-untyped]
    from omegaconf import OmegaConf

    from clipo_megatron.recipe_kind import wrong_command

    configs = [b for a, b in zip(args, args[1:]) if a == "--config"]
    configs += [a.split("=", 1)[1] for a in args if a.startswith("--config=")]
    for path in configs:
        if not Path(path).is_file():
            continue
        try:  # OmegaConf's loader (duplicate keys), then what the document is: OmegaConf
            OmegaConf.load(path)  # reads a plain-text file as one key, the whole file
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path}: not a YAML recipe (not UTF-8 text: byte {e.object[e.start]:#04x} "
                f"at offset {e.start})"
            ) from None
        except yaml.YAMLError as e:
            raise ValueError(yaml_message(e, path)) from None
        if loaded is None:  # an empty recipe: the defaults
            continue
        if not isinstance(loaded, dict) or any(
            not isinstance(v, (dict, list, str, int, float, bool, type(None)))
            for v in loaded.values()
        ):
            raise ValueError(
                f"{path}: a recipe is a YAML mapping of keys (seed:, train:, clipo:, ...), "
                f"not {_kind_of(loaded)}"
            )
        wrong = wrong_command(path, loaded, "runner", f"clipo-megatron {command}")
        if wrong:
            raise ValueError(wrong)
    for arg in args:
        if "=" in arg and not arg.startswith("-"):
            try:
                OmegaConf.from_dotlist([arg])
            except yaml.YAMLError as e:
                raise ValueError(yaml_message(e, f"override {arg!r}")) from None


def _kind_of(loaded: object) -> str:
    """What a YAML document is, in words (never its content: the file may be anything)."""
    if isinstance(loaded, str):
        return "plain text"
    return f"a {type(loaded).__name__}"


def yaml_message(e: Exception, where: str) -> str:
    """e.g. "cfg.yaml:3:2: malformed YAML (did not find expected key)": the first line of the
    problem and its place (yaml counts from 0, editors from 1)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
    if mark is not None and not str(mark.name).startswith("<"):
        where = f"{where}:{mark.line + 1}:{mark.column + 1}"
    return f"{where}: malformed YAML ({problem})"


if __name__ == "__main__":
    sys.exit(main())
