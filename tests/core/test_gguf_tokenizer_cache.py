"""A GGUF's tokenizer converted once per file: later loads read the converted copy without
parsing the file (its vocabulary makes the parse take seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagoda.model_source import ModelNotFoundError, resolve_model


def test_second_load_reads_the_cache_without_parsing_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGODA_CACHE_DIR", str(tmp_path))
    try:
        first = resolve_model("smollm2-135m-instruct")
    except ModelNotFoundError as e:
        pytest.skip(str(e))
    converted = first.tokenizer()
    assert "gguf" in first.__dict__  # parsed to convert it
    assert list(tmp_path.glob("gguf-tokenizers/*/tokenizer_config.json"))

    second = resolve_model("smollm2-135m-instruct")
    cached = second.tokenizer()
    assert "gguf" not in second.__dict__  # not parsed
    text = "Hello, world! Ünïcode and   spaces\n"
    assert cached.encode(text) == converted.encode(text)
    assert cached.chat_template == converted.chat_template
    assert (cached.bos_token_id, cached.eos_token_id) == (converted.bos_token_id,
                                                          converted.eos_token_id)
    messages = [{"role": "user", "content": "Hi"}]
    assert (cached.apply_chat_template(messages, tokenize=False)
            == converted.apply_chat_template(messages, tokenize=False))
