# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The eval CLI's inputs, checked before any model loads and before anything is written.

Each bad input is one ValueError line naming the flag (or the file) and the fix; `eval/run.py`
prints it and exits 2. Checked first so that a typo in `--model` writes no `run.json` (which
would refuse the corrected rerun into the same `--out`), `--limit -1` is not read as "every
question", and a zero-byte checkpoint is named, not a bare `EOFError` after the imports.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# flag -> (attribute, lowest, highest): the integer flags and their ranges.
INT_FLAGS = {
    "--limit": ("limit", 1, 10**7),
    "--n": ("n", 1, 1024),
    "--max-tokens": ("max_tokens", 1, 131_072),
    "--chunk": ("chunk", 1, 4096),
    "--threads": ("threads", 1, 4096),
    "--verify-workers": ("verify_workers", 1, 256),
    "--seed": ("seed", 0, 2**31 - 1),
    "--subset-seed": ("subset_seed", 0, 2**31 - 1),
}
MAX_VERIFY_TIMEOUT = 3600.0  # seconds per answer


def check_numbers(args) -> None:
    """Every numeric flag set is in its range (an unset one takes its default)."""
    for flag, (attr, lo, hi) in INT_FLAGS.items():
        v = getattr(args, attr, None)
        if v is not None and not lo <= v <= hi:
            raise ValueError(f"{flag} {v}: must be an integer in [{lo}, {hi:,}]")
    t = args.verify_timeout
    if not (math.isfinite(t) and 0 < t <= MAX_VERIFY_TIMEOUT):
        raise ValueError(
            f"--verify-timeout {t}: must be seconds per answer in (0, {MAX_VERIFY_TIMEOUT:g}]"
        )


MODEL_KINDS = (
    "smollm2, an HF model directory (config.json + weights) or a `clipo-megatron train` "
    "output dir (config.json + checkpoints/latest.pt)"
)


def check_model(model: str | None) -> None:
    """`--model` names something that loads: `smollm2`, an HF directory, or a train run whose
    config and checkpoint read (weights-only, memory-mapped: cheap)."""
    from clipo_megatron.core.safe_load import check_readable

    if not model:
        raise ValueError(f"--model is required: {MODEL_KINDS}")
    if model == "smollm2":
        return
    p = Path(model)
    if not p.exists():
        raise ValueError(f"--model {model}: no such model or folder; expected {MODEL_KINDS}")
    if not (p / "config.json").is_file():
        raise ValueError(f"--model {model}: has no config.json; expected {MODEL_KINDS}")
    ckpt = p / "checkpoints" / "latest.pt"
    if not ckpt.exists():
        return  # an HF model directory: transformers reads it
    try:
        cfg = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"--model {model}: {p / 'config.json'} is not JSON ({e})") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), dict):
        raise ValueError(
            f"--model {model}: {p / 'config.json'} is not a train run's config (no model block)"
        )
    state = check_readable(ckpt, "retrain the run", f"pass another --model than {model}")
    saved = state.get("config")
    if isinstance(saved, dict) and saved.get("model") not in (None, cfg["model"]):
        raise ValueError(
            f"--model {model}: {ckpt} was trained with model {saved['model']}, but its "
            f"config.json says {cfg['model']}: the checkpoint belongs to another run"
        )


def check_output(out: Path) -> None:
    """`--out` is new, empty or an eval output already (never a file, never another folder)."""
    from clipo_megatron.output_folder import check_output_folder

    check_output_folder(out, kinds=("eval",), key="--out")


def check_resume(out: Path, settings: Any) -> None:
    """An out dir with samples from other settings would mix two evals: refuse, say how to fix."""
    p = out / "run.json"
    key = settings.resume_key()
    if p.exists():
        try:
            old = json.loads(p.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{p} is not JSON ({e}): pass another --out") from None
        diff = {k: (old.get(k), v) for k, v in key.items() if old.get(k) != v}
        if diff:
            raise ValueError(
                f"{out} holds an eval with other settings {diff} (old, new): pass another --out, "
                f"or delete {out} to start over"
            )


def write_resume_key(out: Path, settings: Any) -> None:
    """`--out` made ours (its marker) and `run.json` written: only once every input is valid."""
    from clipo_megatron.output_folder import claim_output_folder

    claim_output_folder(out, kind="eval", key="--out")
    (out / "run.json").write_text(json.dumps(settings.resume_key(), indent=2))


def parse_sources(items: list[str]) -> dict[str, str]:
    """`--source NAME=SOURCE` flags as {canonical dataset name: source}."""
    from clipo_megatron.data.registry import canonical_name

    out = {}
    for it in items:
        if "=" not in it:
            raise ValueError(
                f"--source {it!r}: expected NAME=SOURCE (a path, hf, hf:repo[:config][@split] or gym)"
            )
        name, src = it.split("=", 1)
        out[canonical_name(name)] = src
    return out
