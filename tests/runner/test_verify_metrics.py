# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The runner's step metrics count the verifier's statuses (issue 24, 3): before, a rollout
killed or timed out scored 0 and no metric showed it."""

from types import SimpleNamespace

import pytest
import torch

from clipo_megatron.runner.step_metrics import reward_metrics

ZERO = {"ok": 0, "timeout": 0, "killed": 0, "error": 0, "too_long": 0}


def test_reward_metrics_report_every_status():
    r = torch.tensor([1.0, 0.0, 1.0])
    m = reward_metrics(3, r, torch.zeros(3), torch.ones(3, 2), [[1], [2], [3]], {"verify": 0.5},
                       {**ZERO, "ok": 2, "timeout": 1})  # fmt: skip
    assert {k: v for k, v in m.items() if k.startswith("verify/")} == {
        "verify/ok": 2.0, "verify/timeout": 1.0, "verify/killed": 0.0,
        "verify/error": 0.0, "verify/too_long": 0.0,
    }  # fmt: skip
    assert m["time/verify"] == 0.5 and m["reward/mean"] == pytest.approx(2 / 3)


@pytest.mark.runner
def test_sample_rollouts_count_a_hostile_answer(monkeypatch):
    """N correct rollouts beside one the grader cannot finish: N ones, one "timeout" counted."""
    pytest.importorskip("math_verify")
    import clipo_megatron.verify.boxed as boxed
    from clipo_megatron.data.records import Record
    from clipo_megatron.runner.config import RolloutConfig
    from clipo_megatron.runner.rollouts import sample_rollouts
    from clipo_megatron.verify.pool import VerifierPool, verify_batch
    from tests.verify import slow_graders

    problems = [Record(f"q{i}", str(i + 2), "math", "t", i) for i in range(2)]
    texts = ["\\boxed{2}", "\\boxed{2}", "deaf", "\\boxed{3}", "\\boxed{3}", "\\boxed{3}"]

    class Gen:
        def generate(self, prompts, n, **kw):
            return SimpleNamespace(texts=texts, prompt_index=[0, 0, 0, 1, 1, 1])

    cfg = RolloutConfig(prompts_per_step=2, n=3, verify_timeout=1.0)
    with VerifierPool(2, timeout=1.0, slack=1.0, grader=slow_graders.deaf) as pool:
        monkeypatch.setattr(boxed, "verify_batch", lambda t, a, **kw: verify_batch(t, a, pool=pool))
        _, _, rewards, counts = sample_rollouts(Gen(), problems, cfg, 0, 0, {})
    assert rewards.tolist() == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert counts == {**ZERO, "ok": 5, "timeout": 1}
