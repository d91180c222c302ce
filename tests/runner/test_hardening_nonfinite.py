# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A non-finite value never trains and is never saved (issue 24 items 2 and 6).

- the policy update skips a step whose loss or grad norm is not finite: weights and AdamW
  moments bit-identical, `train/skipped_nonfinite` 1, and the next finite step trains;
- `train` counts the skips (`train/nonfinite_skips`) and stops after
  `train.max_nonfinite_skips` in a row, in one line naming the step and the likely knob;
- a checkpoint with a non-finite weight is not written (the previous one kept);
- a full disk during the checkpoint write is named (ENOSPC) in one line with the resume hint,
  `latest.tmp` is removed and the previous checkpoint is byte-identical.
"""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("omegaconf")

from clipo_megatron.runner import checkpoint, train  # noqa: E402
from clipo_megatron.runner.checkpoint import (  # noqa: E402
    CheckpointNotWritten,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
    write_atomic,
)
from clipo_megatron.runner.config import load_config  # noqa: E402
from clipo_megatron.runner.run import STAGES  # noqa: E402

QUIET = [
    "eval.size=0",
    "output.plots=false",
    "output.tensorboard=false",
    "output.checkpoint_every=1",
    "train.steps=6",
]


class StepRun:
    """What `train`'s loop asks of a `Run`, without a model. `plan[k]`: step k's extra metrics;
    a weight that counts the finite steps (a skipped step leaves it, as the real update does);
    `nan_at`: the step from which the weight itself is NaN (a state the writer must refuse)."""

    def __init__(self, plan: dict[int, dict] | None = None, nan_at: int | None = None):
        self.plan, self.nan_at = plan or {}, nan_at
        self.step_idx, self.history, self.embeddings = 0, [], {}
        self.w = torch.zeros(3)

    def step(self) -> dict:
        extra = self.plan.get(self.step_idx, {})
        m = {"step": self.step_idx, "reward/mean": 0.5, "rollout/token_hash": "h", **extra}
        m.update({f"time/{s}": 0.0 for s in STAGES})
        if not extra.get("train/skipped_nonfinite"):
            self.w += 1
        self.history.append(m)
        self.step_idx += 1
        return m

    def state_dict(self) -> dict:
        w = self.w.clone()
        if self.nan_at is not None and self.step_idx >= self.nan_at:
            w[1] = math.nan
        return {"step": self.step_idx, "policy": {"w": w}, "history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.step_idx, self.history = state["step"], state["history"]
        self.w = state["policy"]["w"].clone()


def _drive(tmp_path, run: StepRun, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    cfg = load_config(None, [*QUIET, *extra, f"output.dir={out}"])
    with train.StopSignals() as stop:
        return train._train(run, cfg, stop), out


def _error_line(capsys) -> str:
    """The one `error:` line on stderr (tqdm's bar shares stderr)."""
    lines = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert len(lines) == 1, lines
    assert lines[0].startswith("clipo-megatron train: error: "), lines  # a line of its own
    return lines[0]


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


SKIP = {"train/skipped_nonfinite": 1.0, "pg/loss": math.nan, "pg/grad_norm": math.nan}


def test_k_consecutive_skips_stop_the_run_naming_the_step_and_the_knob(tmp_path, capsys):
    # step 1 skipped, step 2 finite (the streak resets), steps 3 and 4 skipped: K = 2 -> stop at 4
    plan = {1: SKIP, 3: SKIP, 4: SKIP}
    run = StepRun(plan)
    rc, out = _drive(tmp_path, run, "train.max_nonfinite_skips=2")
    assert rc == 1
    line = _error_line(capsys)
    assert line.startswith("clipo-megatron train: error: step 4: 2 consecutive updates skipped")
    assert "(pg/loss=nan, pg/grad_norm=nan)" in line
    assert "likely knob: train.lr or train.grad_clip" in line
    assert "the last checkpoint is step 4" in line
    assert [r["train/nonfinite_skips"] for r in _rows(out)] == [0, 1, 1, 2, 3]
    saved = load_checkpoint(checkpoint_path(out))
    assert saved["step"] == 4  # step 4's state was not saved: the run stopped before
    assert torch.equal(saved["policy"]["w"], torch.full((3,), 2.0))  # 2 finite steps of 4


def test_a_skipped_head_update_names_the_head_knobs(tmp_path, capsys):
    head = {
        "clipo/head_skipped_nonfinite": 1.0,
        "clipo/loss": math.inf,
        "clipo/valid_group_frac": 1.0,
    }
    rc, _ = _drive(tmp_path, StepRun({0: head, 1: head}), "train.max_nonfinite_skips=2")
    assert rc == 1
    line = _error_line(capsys)
    assert "step 1: 2 consecutive" in line and "clipo/loss=inf" in line
    assert "likely knob: clipo.method.temperature or clipo.method.head_lr" in line


def test_fewer_skips_than_k_train_to_the_end(tmp_path):
    rc, out = _drive(
        tmp_path,
        StepRun({1: SKIP, 2: SKIP, 4: SKIP}),
        "train.max_nonfinite_skips=3",
        "clipo.enabled=false",
    )
    assert rc == 0
    assert [r["train/nonfinite_skips"] for r in _rows(out)] == [0, 1, 2, 2, 3, 3]


def test_non_finite_weights_are_never_written(tmp_path, capsys):
    rc, out = _drive(tmp_path, StepRun(nan_at=3))
    assert rc == 1
    ckpt = checkpoint_path(out)
    line = _error_line(capsys)
    assert line == (
        f"clipo-megatron train: error: checkpoint {ckpt} not written: policy.w is not finite at "
        "step 3 (the previous checkpoint is kept); rerun the same command to resume from step 2"
    )
    assert load_checkpoint(ckpt)["step"] == 2
    assert not ckpt.with_suffix(".tmp").exists()


def _full_disk_on_call(monkeypatch, n: int) -> None:
    """torch.save succeeds n - 1 times, then writes part of the file and raises ENOSPC."""
    real, calls = torch.save, []

    def save(obj, f):
        calls.append(1)
        if len(calls) < n:
            return real(obj, f)
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", save)


def test_a_full_disk_during_the_checkpoint_write_is_named_with_the_resume_hint(
    tmp_path, capsys, monkeypatch
):
    _full_disk_on_call(monkeypatch, 3)  # steps 1 and 2 are saved, step 3's write fails
    out = tmp_path / "run"
    ckpt = checkpoint_path(out)
    kept: list[bytes] = []
    real_write = checkpoint.write_atomic
    monkeypatch.setattr(
        checkpoint,
        "write_atomic",
        lambda s, p: (kept.append(p.read_bytes()) if p.exists() else None, real_write(s, p)),
    )
    rc, out = _drive(tmp_path, StepRun())
    assert rc == 1
    assert _error_line(capsys) == (
        f"clipo-megatron train: error: checkpoint {ckpt} not written: no space left on device "
        "(ENOSPC, latest.tmp removed, the previous checkpoint kept); free space and rerun the "
        "same command to resume from step 2"
    )
    assert not ckpt.with_suffix(".tmp").exists()
    assert ckpt.read_bytes() == kept[-1]  # the step-2 checkpoint, byte for byte
    assert load_checkpoint(ckpt)["step"] == 2


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_real_enospc_reaches_the_writer_through_torch(tmp_path, monkeypatch):
    """Through a path, torch's C++ writer reports a full disk as 'unexpected pos' (no ENOSPC);
    through the file object the writer uses, the kernel's ENOSPC (/dev/full) is named."""
    import builtins

    full = lambda p, mode: builtins.open("/dev/full", mode)  # noqa: E731
    monkeypatch.setattr(checkpoint, "open", full, raising=False)
    with pytest.raises(CheckpointNotWritten) as e:
        write_atomic({"w": torch.zeros(4096)}, tmp_path / "latest.pt")
    assert e.value.full_disk and "no space left on device (ENOSPC" in str(e.value)
    assert not (tmp_path / "latest.pt").exists()


def test_the_writer_checks_every_weight_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "barrier", lambda: None)
    path = checkpoint_path(tmp_path)
    run = StepRun()
    save_checkpoint(run, path)
    before = path.read_bytes()
    for where, bad in [
        ("policy.w", {"policy": {"w": torch.tensor([0.0, math.inf])}}),
        ("optimizer.state_by_name.w.exp_avg_sq",
         {"optimizer": {"state_by_name": {"w": {"step": torch.tensor(1.0),
                                                "exp_avg_sq": torch.tensor([math.nan])}}}}),
        ("head.head.weight", {"head": {"head": {"weight": torch.tensor([[math.nan]])}}}),
    ]:  # fmt: skip
        monkeypatch.setattr(run, "state_dict", lambda bad=bad: {"step": 7, **bad})
        with pytest.raises(CheckpointNotWritten, match=f"not written: {where} is not finite"):
            save_checkpoint(run, path)
        assert path.read_bytes() == before
    # Metrics may hold NaN (a cosine with no pair): not weights, written.
    monkeypatch.setattr(run, "state_dict", lambda: {"step": 8, "history": [{"x": math.nan}]})
    save_checkpoint(run, path)
    assert load_checkpoint(path)["step"] == 8


# ------------------------------------------------------------- the real update on a tiny model


@pytest.mark.mcore
def test_the_policy_update_skips_a_non_finite_step_and_trains_the_next(mcore_single_process):
    pytest.importorskip("megatron.core")
    pytest.importorskip("transformers")
    from clipo_megatron.core.objectives import get_objective
    from clipo_megatron.runner.passes import PolicyLoss, UpdateBatch, pack, policy_update
    from clipo_megatron.runner.policy import build_policy
    from clipo_testkit.tiny_models import tiny_hf_config, tiny_hf_model

    hf = tiny_hf_model(tiny_hf_config("llama", vocab_size=96, hidden=64, ffn=128), 0)
    model, _ = build_policy(hf)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 96, (5,), generator=g).tolist()] * 4
    responses = [torch.randint(1, 96, (3,), generator=g).tolist() for _ in range(4)]
    ids, mask = pack(prompts, responses, pad_id=0)
    old = torch.zeros(ids.shape)  # [B, S] ratios exp(lp - 0): finite
    loss = PolicyLoss(get_objective("grpo"), None, None, 0.0)
    w0 = {k: v.clone() for k, v in model.state_dict().items() if torch.is_tensor(v)}

    adv = torch.tensor([1.0, -1.0, math.nan, 0.5])  # one NaN advantage (a NaN r_CL, say)
    m = policy_update(model, opt, UpdateBatch(ids, mask, old, adv), loss, 2, 1.0)
    assert m["train/skipped_nonfinite"] == 1.0 and math.isnan(m["pg/loss"])
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in w0.items())
    assert opt.state_dict()["state"] == {}  # no AdamW moment, no step count

    adv = torch.tensor([1.0, -1.0, 0.25, 0.5])
    m = policy_update(model, opt, UpdateBatch(ids, mask, old, adv), loss, 2, 1.0)
    assert m["train/skipped_nonfinite"] == 0.0 and math.isfinite(m["pg/grad_norm"])
    assert not all(torch.equal(v, model.state_dict()[k]) for k, v in w0.items())


TINY = [
    "model.source=tiny",
    "model.tiny_hidden=32",
    "model.tiny_layers=1",
    "rollout.prompts_per_step=2",
    "rollout.n=4",
    "rollout.max_tokens=4",
    "rollout.backend=hf",
    "train.micro_batch=8",
    "train.lr=1e-2",
    "clipo.method.embed_dim=8",
    "threads=1",
]


@pytest.mark.slow
@pytest.mark.mcore
def test_a_poisoned_loss_skips_every_update_and_stops_the_run(tmp_path, capsys, monkeypatch):
    """The real run on a tiny model: the policy loss is NaN from step 1 on (a monkeypatched
    loss, as reward_lambda=1e300 made it): weights and AdamW state stay those after step 0,
    the count grows, and after K = 2 the run stops in one line."""
    pytest.importorskip("megatron.core")
    pytest.importorskip("transformers")
    pytest.importorskip("reasoning_gym")
    from clipo_megatron.models.smollm2 import smollm2_gguf_path
    from clipo_megatron.runner import passes
    from clipo_megatron.runner import run as run_mod

    try:
        smollm2_gguf_path()  # the tiny model's tokenizer
    except FileNotFoundError as e:
        pytest.skip(str(e))
    real_loss, real_step = passes.PolicyLoss.__call__, run_mod.Run.step
    poisoned = {"on": False}

    def loss(self, logprobs, mb, whole):
        value, stats = real_loss(self, logprobs, mb, whole)
        return (value * math.nan if poisoned["on"] else value), stats

    snaps: list[dict] = []

    def step(self):
        m = real_step(self)
        poisoned["on"] = True  # every step after the first
        state = {k: v.clone() for k, v in self.model.state_dict().items() if torch.is_tensor(v)}
        opt = self.optimizer.state_dict()["state"]
        snaps.append({"w": state, "steps": {i: float(s["step"]) for i, s in opt.items()}})
        return m

    monkeypatch.setattr(passes.PolicyLoss, "__call__", loss)
    monkeypatch.setattr(run_mod.Run, "step", step)
    out = tmp_path / "run"
    argv = [*TINY, *QUIET, "train.max_nonfinite_skips=2", f"output.dir={out}"]
    assert train.main(argv) == 1
    line = _error_line(capsys)
    assert line.startswith("clipo-megatron train: error: step 2: 2 consecutive updates skipped")
    assert "pg/loss=nan" in line and "likely knob: train.lr or train.grad_clip" in line
    rows = _rows(out)
    assert [r["train/skipped_nonfinite"] for r in rows] == [0, 1, 1]
    assert [r["train/nonfinite_skips"] for r in rows] == [0, 1, 2]
    assert len(snaps) == 3
    for later in snaps[1:]:  # the skipped steps moved nothing: weights and AdamW step counts
        assert later["steps"] == snaps[0]["steps"] and set(later["steps"].values()) == {1.0}
        assert all(torch.equal(v, later["w"][k]) for k, v in snaps[0]["w"].items())
    saved = load_checkpoint(checkpoint_path(out))
    assert saved["step"] == 2  # saved after step 1 (weights of step 0), not after step 2
    assert all(torch.equal(v, snaps[0]["w"][k]) for k, v in saved["policy"].items())
