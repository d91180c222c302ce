# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Tiny random models for the tests, built in the test (nothing downloaded).

One home for the tiny-model literals: a character-level tokenizer with a chat
template, Llama / Qwen2 HF configs (GQA 4 heads / 2 KV groups, SwiGLU, RoPE,
RMSNorm), a saved HF model directory, the Megatron GPTArch the Megatron
tests share (`tiny_arch` for a variant of it) and SmolLM2-135M's shapes.
vLLM on CPU needs head_dim >= 32: pass hidden=128.
"""

from __future__ import annotations

import dataclasses
import string
from pathlib import Path

from clipo_megatron.models.arch import GPTArch

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

TINY_ARCH = GPTArch(
    vocab_size=96,
    hidden_size=64,
    num_layers=2,
    num_attention_heads=4,
    num_query_groups=2,
    ffn_hidden_size=128,
    max_position_embeddings=64,
    tie_embeddings=False,
)  # the Megatron tests' GPTModel: untied, so the output layer is a tensor of its own

# SmolLM2-135M's shapes (no weights): what a TP size must divide (9 heads, 3 KV groups).
SMOLLM2_135M_ARCH = GPTArch(
    vocab_size=49152,
    hidden_size=576,
    num_layers=30,
    num_attention_heads=9,
    num_query_groups=3,
    ffn_hidden_size=1536,
)


def tiny_arch(**changes) -> GPTArch:
    """TINY_ARCH with the fields a test needs different (e.g. one layer, tied embeddings)."""
    return dataclasses.replace(TINY_ARCH, **changes)


def hf_llama_config_of(arch: GPTArch, **extra):
    """The HF Llama config with `arch`'s shapes (the inverse of `arch_from_hf_config`);
    `extra` adds or overrides HF keys."""
    import transformers

    shapes = dict(
        vocab_size=arch.vocab_size,
        hidden_size=arch.hidden_size,
        intermediate_size=arch.ffn_hidden_size,
        num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_query_groups,
        max_position_embeddings=arch.max_position_embeddings,
        rope_theta=arch.rope_theta,
        rms_norm_eps=arch.norm_eps,
        tie_word_embeddings=arch.tie_embeddings,
    )
    return transformers.LlamaConfig(**{**shapes, **extra})


def char_tokenizer():
    """Every printable character a token, plus <pad> <s> </s> <unk> and two chat-role tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>"]
    chars = sorted(set(string.printable) - {"\x0b", "\x0c"})
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")  # every character a token
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=specials[4:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_hf_config(
    family: str = "llama",
    *,
    vocab_size: int,
    hidden: int = 64,
    ffn: int = 96,
    tied: bool = True,
    max_positions: int = 64,
):
    """A 2-layer HF Llama or Qwen2 config (4 heads, 2 KV heads, RMSNorm eps 1e-5), no tokenizer."""
    import transformers

    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[family]
    return config_class(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-5,
    )


def tiny_llama_config(tok, *, hidden: int):
    """A 2-layer Llama config over the character tokenizer (4 heads, 2 KV heads, 1024 positions)."""
    import transformers

    return transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def tiny_hf_model(config, seed: int = 0):
    """A random fp32 HF causal LM for `config`, in eval mode, seeded."""
    import torch
    import transformers

    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).float().eval()


def tiny_char_llama(*, hidden: int, seed: int = 0):
    """(random Llama, char tokenizer): the tiny policy of the generation and eval tests."""
    tok = char_tokenizer()
    return tiny_hf_model(tiny_llama_config(tok, hidden=hidden), seed), tok


def save_tiny_llama(path: Path, seed: int = 0, *, hidden: int = 32) -> Path:
    """A 2-layer random Llama + its char tokenizer saved as an HF model directory."""
    model, tok = tiny_char_llama(hidden=hidden, seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
