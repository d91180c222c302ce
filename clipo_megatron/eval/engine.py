# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Generate, grade, record, score: one dataset after another, in resumable chunks.

Questions are cut into fixed chunks of `chunk` questions; each chunk is
generated with its own seed (run seed, dataset, chunk number), so a resumed
run samples exactly what the uninterrupted run would have. A chunk whose
samples are all on disk is skipped; a partly written one is regenerated and
only its missing samples are written.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clipo_megatron.data.records import Record
from clipo_megatron.eval.aggregate import averages, dataset_score
from clipo_megatron.eval.generator import Generator, texts_per_prompt
from clipo_megatron.eval.store import SampleStore
from clipo_megatron.generation.sampling import Sampling
from clipo_megatron.verify.choice import graded_answer as extracted_answer
from clipo_megatron.verify.graders import Verdict, status_counts
from clipo_megatron.verify.pool import VerifierPool

__all__ = ["EvalSettings", "chunk_seed", "evaluate", "evaluate_dataset", "extracted_answer"]


@dataclass
class EvalSettings:
    n: int = 1
    temperature: float = 0.6  # 0: greedy
    top_p: float = 0.95
    # Every other sampling knob, pinned and recorded (generation/sampling.py): a model's
    # generation_config never applies (Qwen2.5-Instruct ships top_k 20, repetition_penalty 1.05).
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 2048
    # The grader (verify/graders.py GRADERS): math_verify (recommended) | paper (the authors');
    # None: the pool's own (math_verify unless the pool was built with another).
    grader: str | None = None
    seed: int = 0
    chunk: int = 16  # questions per generate call
    # What selects the questions (recorded so a resume with other settings is refused).
    limit: int | None = None
    subset_seed: int = 0
    model: str = ""
    extra: dict = field(default_factory=dict)

    def sampling(self) -> Sampling:
        """The knobs one generation uses (ValueError naming a bad one)."""
        return Sampling(
            self.temperature, self.top_p, self.top_k, self.min_p, self.repetition_penalty
        )

    def resume_key(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        return d


def chunk_seed(seed: int, dataset: str, chunk: int) -> int:
    return (seed * 1_000_003 + zlib.crc32(dataset.encode()) % 1_000_003 + chunk * 7919) % (
        2**31 - 1
    )


def evaluate_dataset(
    gen: Generator,
    name: str,
    records: list[Record],
    settings: EvalSettings,
    out_dir: Path,
    pool: VerifierPool,
    *,
    progress: bool = True,
) -> dict:
    """Run one dataset to completion (skipping what is on disk); its score and counters."""
    from tqdm import tqdm

    store = SampleStore(out_dir, name)
    c = max(1, settings.chunk)
    chunks = [records[i : i + c] for i in range(0, len(records), c)]
    new, t_gen, t_ver = 0, 0.0, 0.0
    for k, chunk in enumerate(
        tqdm(chunks, desc=name, unit="chunk", disable=not progress, leave=False)
    ):
        added, gen_s, ver_s = _run_chunk(gen, pool, store, name, k, chunk, settings)
        new, t_gen, t_ver = new + added, t_gen + gen_s, t_ver + ver_s
    return {
        **_dataset_counts(store, records, settings.n),
        "new_samples": new,
        "generate_s": t_gen,
        "verify_s": t_ver,
    }


def _run_chunk(
    gen: Generator,
    pool: VerifierPool,
    store: SampleStore,
    name: str,
    k: int,
    chunk: list[Record],
    settings: EvalSettings,
) -> tuple[int, float, float]:
    """Chunk k's missing samples generated, graded and appended: (new samples, generate s,
    verify s); a chunk whose samples are all on disk costs nothing."""
    todo = [(r, s) for r in chunk for s in range(settings.n) if not store.done(r.index, s)]
    if not todo:
        return 0, 0.0, 0.0
    t0 = time.perf_counter()
    texts = _generate_chunk(gen, name, k, chunk, settings)
    t1 = time.perf_counter()
    pos = {r.index: j for j, r in enumerate(chunk)}
    responses = [texts[pos[r.index]][s] for r, s in todo]
    # The recorded answer is read in the workers, under the same per-answer deadline.
    verdicts = pool.grade(
        responses,
        [r.ground_truth for r, _ in todo],
        [r.kind for r, _ in todo],
        grader=settings.grader,
        extract=True,
    )
    t2 = time.perf_counter()
    store.append(_sample_rows(name, todo, responses, verdicts))
    return len(todo), t1 - t0, t2 - t1


def _generate_chunk(
    gen: Generator, name: str, k: int, chunk: list[Record], settings: EvalSettings
) -> list[list[str]]:
    """n responses per question of chunk k, every knob pinned, seeded by the chunk alone."""
    out = gen.generate(
        [r.prompt for r in chunk],
        settings.n,
        sampling=settings.sampling(),
        max_tokens=settings.max_tokens,
        seed=chunk_seed(settings.seed, name, k),
    )
    return texts_per_prompt(out, len(chunk), settings.n)


def _sample_rows(
    name: str, todo: list[tuple[Record, int]], responses: list[str], verdicts: list[Verdict]
) -> list[dict]:
    """One samples/<dataset>.jsonl line per graded sample."""
    return [
        {
            "dataset": name,
            "index": r.index,
            "sample": s,
            "data_source": r.data_source,
            "kind": r.kind,
            "prompt": r.prompt,
            "response": resp,
            "extracted": v.answer,
            "ground_truth": r.ground_truth,
            "verdict": v.score,
            "status": v.status,
            "status_detail": v.detail,
        }
        for (r, s), resp, v in zip(todo, responses, verdicts)
    ]


def _dataset_counts(store: SampleStore, records: list[Record], n: int) -> dict:
    """The dataset's score and counters, from every sample on disk (this run's and earlier)."""
    rows = store.records([r.index for r in records], n)
    scores = [float(r["verdict"]) for r in rows]
    return {
        "score": dataset_score(scores),
        "questions": len(records),
        "samples": len(rows),
        "correct": int(sum(scores)),
        "no_answer": sum(r["extracted"] is None for r in rows),
        "timeouts": sum(r["status"] != "ok" for r in rows),  # any status but "ok"
        "statuses": status_counts(r["status"] for r in rows),
    }


def evaluate(
    gen: Generator,
    datasets: dict[str, list[Record]],
    settings: EvalSettings,
    out_dir: str | Path,
    *,
    pool: VerifierPool | None = None,
    progress: bool = True,
) -> dict:
    """Every dataset in order; results (per dataset, averages, throughput of this invocation)."""
    out_dir = Path(out_dir)
    own = pool is None
    pool = pool or VerifierPool()
    t0 = time.perf_counter()
    try:
        per = {
            name: evaluate_dataset(gen, name, recs, settings, out_dir, pool, progress=progress)
            for name, recs in datasets.items()
        }
    finally:
        if own:
            pool.close()
    wall = time.perf_counter() - t0
    new = sum(d["new_samples"] for d in per.values())
    scores = {name: d["score"] for name, d in per.items()}
    return {
        "settings": asdict(settings),
        "scores": scores,
        "averages": averages(scores),
        "datasets": per,
        "throughput": {
            "new_samples": new,
            "seconds": wall,
            "samples_per_s": new / wall if wall > 0 else 0.0,
            "generate_s": sum(d["generate_s"] for d in per.values()),
            "verify_s": sum(d["verify_s"] for d in per.values()),
        },
    }
