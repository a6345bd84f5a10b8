"""Tiny random HF checkpoints of each supported architecture, made in the test run."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

from tests.models.model_harness import randomize_weights

VOCAB = 256
_COMMON = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
)


def tiny_configs() -> dict[str, PretrainedConfig]:
    return {
        "llama": LlamaConfig(**_COMMON, rope_theta=10000.0),
        "mistral": MistralConfig(**_COMMON, sliding_window=None),
        "qwen2": Qwen2Config(**{**_COMMON, "tie_word_embeddings": True}),
        "qwen3": Qwen3Config(**_COMMON, head_dim=32),
    }


def wide_llama_config() -> LlamaConfig:
    """A tiny Llama whose linears every quantization at load can take (their inputs are
    multiples of 128, INT4's group)."""
    return LlamaConfig(**{**_COMMON, "hidden_size": 128, "intermediate_size": 256},
                       rope_theta=10000.0)


LONGROPE_CONTEXT = 64
"""The original context of the tiny Phi-3's LongRoPE (the engine serves up to it)."""


def dense_family_configs() -> dict[str, PretrainedConfig]:
    """Gemma 2, Gemma 3 and Phi-3, each with its features in play at this size: sliding
    windows shorter than the longer prompts, soft caps near the logits' and scores' size
    (with `random_weights` checkpoints), an attention scale that is not head_dim's, Gemma
    3's own RoPE for sliding layers and linear scaling for global ones, Phi-3's partial
    rotary and LongRoPE short/long factors."""
    gemma = dict(_COMMON, head_dim=16, query_pre_attn_scalar=24, sliding_window=8,
                 tie_word_embeddings=True)
    rot_half = 16 // 2 // 2  # head 16, half of it rotated
    return {
        "gemma2": Gemma2Config(**gemma, attn_logit_softcapping=4.0, final_logit_softcapping=3.0),
        "gemma3": Gemma3TextConfig(
            **{**gemma, "num_hidden_layers": 3}, sliding_window_pattern=2,
            final_logit_softcapping=3.0, rope_theta=10000.0, rope_local_base_freq=100.0,
            rope_scaling={"rope_type": "linear", "factor": 4.0}),
        "phi3": Phi3Config(
            **_COMMON, partial_rotary_factor=0.5,
            sliding_window=12, pad_token_id=0, original_max_position_embeddings=LONGROPE_CONTEXT,
            rope_scaling={"type": "longrope", "short_factor": [1.0, 1.5, 2.0, 3.0][:rot_half],
                          "long_factor": [2.0, 4.0, 8.0, 16.0][:rot_half]}),
    }


def save_tokenizer(path: Path) -> None:
    """A word-level tokenizer: token i >= 3 is the word "w{i}"; 0-2 are unk, bos, eos."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(path)


def make_checkpoint(path: Path, config: PretrainedConfig, seed: int = 0, *,
                    random_weights: bool = False) -> Path:
    """Save a random float32 model of `config` (with a tokenizer) to `path`: HF's
    initialization, or with `random_weights` every parameter O(0.1) noise (norms 1 + noise),
    so that norms, biases and soft caps all matter."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if random_weights:
        randomize_weights(model)
    model.save_pretrained(path)
    save_tokenizer(path)
    return path


def hf_greedy(path: Path, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """HF transformers' greedy continuation of each prompt, one at a time, eos ignored."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    outputs = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
            outputs.append(out[0, len(prompt):].tolist())
    return outputs


CHAR_TOKENS = [chr(c) for c in range(0x20, 0x7F)] + [
    '{"', '":', '",', '"}', '": ', ', "', "true", "false", "null", "  ", "\n", "ab", "12",
    "00", "xyz", "abc", "red", "green", "blue", "yes", "no", "[]", "{}", "]}", "},"]
"""The char tokenizer's tokens after the three specials: printable ASCII and some pieces
of JSON, so that grammars have several ways to spell the same text."""


def save_char_tokenizer(path: Path) -> int:
    """A tokenizer whose tokens are `CHAR_TOKENS` (ids 3...; 0-2 are unk, bos, eos), fewer
    than the tiny models' VOCAB: the model's vocabulary is padded past the tokenizer's.
    Returns the tokenizer's size."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {t: i + 3 for i, t in enumerate(CHAR_TOKENS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(path)
    return len(vocab)
