# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The contract suite's policy: a tiny Llama (character tokenizer) briefly fine-tuned on GSM8K answers.

A random tiny model never writes a correct `\\boxed{}` answer, so every group
would be all-wrong and CLIPO would have nothing to contrast. The model is
fine-tuned (plain torch, a few seconds) to answer the first training prompts
of the shared GSM8K parquet with `\\boxed{<answer>}` half of the time and a
wrong number the other half, each after one of four lead-ins (so correct
rollouts of a group differ in content and length), through the same prompt the NeMo-RL processor
builds (`clipo_gsm8k`). Sampling it then gives groups with both correct and
incorrect rollouts: real rewards from the real verifier, valid CLIPO groups.
Nothing is downloaded; the model directory is cached per test session.
"""

from __future__ import annotations

from pathlib import Path

import torch

from clipo_testkit.tiny_models import char_tokenizer, tiny_llama_config

TRAIN_PARQUET = "train/gsm8k.parquet"
# Correct rollouts must differ (content and length): identical correct responses get identical
# pooled states, hence one r_CL per group, and GRPO's normalisation would remove CLIPO exactly.
LEAD_INS = ("", "so ", "ans: ", "thus x = ")


def first_problems(data_dir: Path, k: int) -> list[tuple[list[int], str]]:
    """(prompt token ids, ground truth) of the first k training rows, via the real processor."""
    import pandas as pd

    from clipo_megatron.nemo_rl.data import clipo_data_processor

    tok = char_tokenizer()
    rows = pd.read_parquet(data_dir / TRAIN_PARQUET).head(k).to_dict("records")
    out = []
    for i, row in enumerate(rows):
        d = clipo_data_processor(
            row, None, tok, 4096, i, dataset="gsm8k", input_key="prompt", output_key="reward_model"
        )
        out.append((d["message_log"][0]["token_ids"].tolist(), d["extra_env_info"]["ground_truth"]))
    return out


def build_contract_model(
    path: Path, data_dir: Path, *, k: int = 8, steps: int = 200, config=None, prepare=None
) -> Path:
    """Save the fine-tuned tiny model + tokenizer to `path` (an HF model directory). `config`: an
    HF config of another architecture (the MoE contract case's Qwen3-MoE); a tiny Llama if None.
    `prepare(model)`: run on the initialised model before the fine-tune (the MLA case's expert
    bias, a buffer the fine-tune leaves as set)."""
    import transformers

    tok = char_tokenizer()
    problems = first_problems(data_dir, k)
    torch.manual_seed(0)
    if config is None:
        model = transformers.LlamaForCausalLM(tiny_llama_config(tok, hidden=64)).float()
    else:
        model = transformers.AutoModelForCausalLM.from_config(config).float()
    if prepare is not None:
        prepare(model)
    rows = []  # each prompt with its answer and the next prompt's (a wrong one), after each lead-in
    for i, (ids, answer) in enumerate(problems):
        for lead in LEAD_INS:
            for target in (answer, problems[(i + 1) % k][1]):
                resp = tok(f"{lead}\\boxed{{{target}}}", add_special_tokens=False)["input_ids"]
                rows.append((ids, resp + [tok.eos_token_id]))
    s = max(len(p) + len(r) for p, r in rows)
    tokens = torch.full((len(rows), s), tok.pad_token_id)
    labels = torch.full((len(rows), s), -100)
    for j, (p, r) in enumerate(rows):
        tokens[j, : len(p) + len(r)] = torch.tensor(p + r)
        labels[j, len(p) : len(p) + len(r)] = torch.tensor(r)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=tokens, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path
