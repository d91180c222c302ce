# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Per-sample records on disk: what makes an eval inspectable and resumable.

One jsonl per dataset (`samples/<dataset>.jsonl`), one line per (question,
sample): prompt, response, extracted answer, verdict. Lines are appended and
flushed after every chunk of questions, so an interrupted eval loses at most
the chunk in flight; a torn last line (killed mid-write) is dropped on load.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class SampleStore:
    def __init__(self, out_dir: str | Path, dataset: str):
        self.path = Path(out_dir) / "samples" / f"{dataset}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows: dict[tuple[int, int], dict] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        lines = self.path.read_text().splitlines()
        good = []
        for line in lines:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill: that sample is redone
            self.rows[(r["index"], r["sample"])] = r
            good.append(line)
        if len(good) != len(lines):  # rewrite without the torn line so appends stay valid jsonl
            self.path.write_text("".join(g + "\n" for g in good))

    def done(self, index: int, sample: int) -> bool:
        return (index, sample) in self.rows

    def append(self, rows: list[dict]) -> None:
        with self.path.open("a") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
                self.rows[(r["index"], r["sample"])] = r
            f.flush()
            os.fsync(f.fileno())

    def records(self, indices: list[int], n: int) -> list[dict]:
        """The stored rows of these questions x n samples, in order (all must be done)."""
        return [self.rows[(i, s)] for i in indices for s in range(n)]
