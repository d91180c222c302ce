# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Break CLIPO on purpose and show that the NeMo-RL contract suite goes red (docs/nemo_rl.md).

    NEMO_RL_SRC=<checkout> [BRIDGE_SRC=..] [MEGATRON_LM_SRC=..] \
      python scripts/mutation_check.py [--only NAME ...] [--keep]

For the unmutated tree and then for each mutation: copy this checkout to a scratch directory
(no .git, the `.venv_nemo_rl-*` environments linked, not rebuilt), apply the mutation (an exact
string replacement that must match once), run the contract tests that mutation must turn red
there (`scripts/test_nemo_rl.sh`; by default GRPO with CLIPO on, NeMo-RL's real grpo_train over
NeMo-RL's own Megatron worker with the extension; a layout's mutation: that layout against TP 1,
`test_layouts.py`), the unmutated copy all of them, and report green / red with the first failing
assertion. Exit status 0 iff the unmutated copy is green and every mutation red.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# GRPO with CLIPO: the 3-step case (its CLIPO checks), then its exact resume (one run shared)
TESTS = (
    "tests/nemo_rl/test_contract.py::test_grpo_train[grpo-clipo]",
    "tests/nemo_rl/test_contract.py::test_grpo_train_resume[grpo-clipo]",
)
LAYOUT = "tests/nemo_rl/real_worker/test_layouts.py::test_layout_equals_tp1[{}]"
MOE = "tests/nemo_rl/real_worker/test_moe_layouts.py::{}"
SCRIPT = "scripts/test_nemo_rl.sh"


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...] = TESTS  # the tests that must go red


MUTATIONS = [
    Mutation(
        "r_cl_dropped",
        "r' = r (r_CL computed, never added)",
        "clipo_megatron/nemo_rl/advantage_estimator.py",
        "shaped = shaped_rewards(rewards, r_cl).to(rewards.dtype)",
        "shaped = rewards.clone()",
    ),
    Mutation(
        "r_cl_wrong_rows",
        "r_CL reversed within each group before r' = r + r_CL",
        "clipo_megatron/nemo_rl/advantage_estimator.py",
        "        r_cl = out.rewards.to(rewards.device)  # [B]\n",
        "        r_cl = out.rewards.to(rewards.device)  # [B]\n"
        "        perm = torch.arange(r_cl.numel())\n"
        "        for g in group_ids.unique():\n"
        "            rows = (group_ids == g).nonzero().flatten()\n"
        "            perm[rows] = rows.flip(0)\n"
        "        r_cl = r_cl[perm]\n",
    ),
    Mutation(
        "head_frozen",
        "the head's optimizer step skipped (loss and gradients still computed)",
        "clipo_megatron/megatron/head_trainer.py",
        "        self.optimizer.step()\n        return True\n",
        "        return True  # mutation: no optimizer step\n",
    ),
    Mutation(
        "pool_prompt_tokens",
        "pooling over every token of the row (the attention mask), not the response mask",
        "clipo_megatron/megatron/pooling/microbatch_pooler.py",
        "mask = None if segments is not None else torch.as_tensor(data[self.response_key])",
        "mask = None if segments is not None else torch.ones_like(torch.as_tensor(data[self.response_key]))",
    ),
    # the layouts: NeMo-RL's worker in each layout against TP 1 (test_layouts.py)
    Mutation(
        "tp_wrong_shard",
        "under sequence parallel each TP rank pools the other rank's slice of the sequence",
        "clipo_megatron/megatron/pooling/sharded.py",
        "    return slice(tp_rank * step, (tp_rank + 1) * step)",
        "    return slice((tp_size - 1 - tp_rank) * step, (tp_size - tp_rank) * step)",
        (LAYOUT.format("tp2-sp-distopt"),),
    ),
    Mutation(
        "pp_every_stage",
        "the head built and fed on every pipeline stage, not the last one only",
        "clipo_megatron/nemo_rl/worker.py",
        "        if not mp.is_pipeline_last_stage():\n            return False\n",
        "",
        (LAYOUT.format("pp2"),),
    ),
    Mutation(
        "cp_sum_dropped",
        "the pooled sums not all-reduced over CP (each CP rank pools its own chunks only)",
        "clipo_megatron/megatron/pooling/sharded.py",
        "    if group_size(cp_group) > 1:\n        dist.all_reduce(sums, group=cp_group)\n",
        "",
        (LAYOUT.format("cp2"),),
    ),
    # MoE: NeMo-RL's worker on a mixture-of-experts policy (test_moe_layouts.py)
    Mutation(
        "moe_pool_expert_output",
        "the capture hooked on the last MoE layer's output (routed experts' sum), not the final norm",
        "clipo_megatron/nemo_rl/worker.py",
        "        norm = require_final_norm(self.model) if st.head_state is not None else None\n",
        "        from megatron.core.utils import unwrap_model\n\n"
        "        norm = unwrap_model(self.model).decoder.layers[-1].mlp if st.head_state else None\n",
        (MOE.format("test_moe_ep1_matches_hugging_face[routed]"),),
    ),
    Mutation(
        "moe_head_per_ep_rank",
        "the head drawn per expert-parallel rank (seed + EP rank), not one head on every rank",
        "clipo_megatron/nemo_rl/worker.py",
        "            torch.manual_seed(cfg.method.seed)  #",
        "            torch.manual_seed(cfg.method.seed + mp._ps().get_expert_model_parallel_rank())  #",
        (MOE.format("test_moe_layout_equals_ep1[routed-ep2]"),),
    ),
    Mutation(
        "moe_head_per_ep_rank_bf16",
        "the same head per EP rank, held by bf16 at EP 2 against bf16 at EP 1 (shared expert)",
        "clipo_megatron/nemo_rl/worker.py",
        "            torch.manual_seed(cfg.method.seed)  #",
        "            torch.manual_seed(cfg.method.seed + mp._ps().get_expert_model_parallel_rank())  #",
        (MOE.format("test_moe_bf16_ep2_equals_bf16_ep1[shared]"),),
    ),
    Mutation(
        "moe_head_restore_dropped",
        "a resume that reads the head's file but never loads it (the head as drawn at setup)",
        "clipo_megatron/nemo_rl/worker_state.py",
        '        load_full_trainer_state(self.trainer, saved["trainer"], tp_group)\n',
        "",
        (MOE.format("test_moe_checkpoint_moves_between_ep_layouts[routed-tp2-sp-ep2-to-ep4]"),),
    ),
]


def scratch_copy(dest: Path) -> None:
    skip = shutil.ignore_patterns(
        ".git", ".venv*", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "*.egg-info"
    )
    shutil.copytree(ROOT, dest, ignore=skip, symlinks=True)
    for venv in [*ROOT.glob(".venv_nemo_rl-*"), *ROOT.glob(".venv_real_worker-*")]:  # reuse them
        (dest / venv.name).symlink_to(venv)


def apply(dest: Path, m: Mutation) -> None:
    f = dest / m.path
    text = f.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(
            f"{m.name}: the line to mutate occurs {text.count(m.old)} times in {m.path}"
        )
    f.write_text(text.replace(m.old, m.new))


def run(dest: Path, log: Path, tests: tuple[str, ...]) -> tuple[str, str, float]:
    """("green" | "RED" | "skipped/error", first failing line, seconds) of the contract tests."""
    t0 = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", SCRIPT, *tests, "-x", "--tb=short", "-p", "no:cacheprovider"],
            cwd=dest,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            start_new_session=True,  # its own process group: pytest, Ray and its workers
        )
        try:
            rc = proc.wait()
        except BaseException:  # interrupted: take the whole run down with us
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    text = log.read_text()
    reason = next((ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")), "")
    if rc == 0 and f"{len(tests)} passed" in text:
        result = "green"
    elif re.search(r"\b\d+ failed", text):
        result = "RED"
    else:  # skipped, collection error, crash: neither verdict
        result = "skipped/error"
        reason = reason or text.strip().splitlines()[-1]
    return result, reason[:160], time.time() - t0


def main() -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill -TERM cleans up like Ctrl-C
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", nargs="*", help="mutation names (default: all)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copies and logs")
    args = ap.parse_args()
    if not os.environ.get("NEMO_RL_SRC"):
        print("set NEMO_RL_SRC to a NeMo-RL checkout (see docs/nemo_rl.md)", file=sys.stderr)
        return 2
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    todo = [None, *chosen]
    every = tuple(dict.fromkeys(t for m in chosen for t in m.tests))  # the unmutated run: all
    work = Path(tempfile.mkdtemp(prefix="clipo_mutation_"))
    # the tests find the shared data beside the checkout (parents[3] / "shared")
    (work / "shared").symlink_to((ROOT.parent / "shared").resolve())
    rows, ok = [], True
    for m in todo:
        name = "none (unmutated)" if m is None else m.name
        dest = work / (m.name if m else "clean")
        scratch_copy(dest)
        if m is not None:
            apply(dest, m)
        result, reason, secs = run(dest, work / f"{dest.name}.log", m.tests if m else every)
        expected = "green" if m is None else "RED"
        ok &= result == expected
        verdict = result + ("" if result == expected else "  <-- NOT AS EXPECTED")
        rows.append(f"| {name} | {m.what if m else '-'} | {verdict} | {secs:.0f} s | {reason} |")
        print(rows[-1], flush=True)
        if not args.keep:
            shutil.rmtree(dest)
            (work / f"{dest.name}.log").unlink()
    print(f"\nNeMo-RL: {os.environ['NEMO_RL_SRC']}; tests: {' '.join(every)}")
    print(
        "| mutation | what | contract tests | wall | first failing assertion |\n|---|---|---|---|---|"
    )
    print("\n".join(rows))
    print(f"logs: {work}" if args.keep else "")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
