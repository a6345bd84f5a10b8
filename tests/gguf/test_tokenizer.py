"""The SmolLM2 tokenizer and chat template, loaded from the GGUF through transformers."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tokenizer(smollm2):
    return smollm2.load_tokenizer()


def test_special_tokens(tokenizer):
    assert (tokenizer.bos_token, tokenizer.bos_token_id) == ("<|im_start|>", 1)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert tokenizer.pad_token_id == 2
    assert len(tokenizer) == 49152


def test_round_trip(tokenizer):
    text = "The capital of Germany is Berlin. 1234 ünïcode\n  spaces"
    ids = tokenizer.encode(text)
    assert ids[0] != tokenizer.bos_token_id  # the file says add_bos_token = false
    assert tokenizer.decode(ids) == text


def test_chat_template(tokenizer):
    messages = [{"role": "user", "content": "What is the capital of Germany?"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>user\nWhat is the capital of Germany?<|im_end|>\n" in text
    assert text.startswith("<|im_start|>system\n")  # the template's default system prompt
    assert text.endswith("<|im_start|>assistant\n")
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert ids[0] == tokenizer.bos_token_id and tokenizer.decode(ids) == text
