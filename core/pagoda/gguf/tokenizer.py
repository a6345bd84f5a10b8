"""The tokenizer and chat template stored in a GGUF file, through transformers."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from pagoda.gguf.fields import GGUFMetadata

_SPECIAL_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


def load_tokenizer(path: Path, meta: GGUFMetadata) -> PreTrainedTokenizerBase:
    """transformers' tokenizer for the GGUF at `path`.

    The file's chat template and bos/eos/pad ids win over whatever the conversion chose.
    """
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    template = meta.get("tokenizer.chat_template")
    if template and tokenizer.chat_template != template:
        tokenizer.chat_template = template
    for attr, key in _SPECIAL_IDS.items():
        token_id = meta.get(key)
        if token_id is not None and getattr(tokenizer, f"{attr}_id") != token_id:
            setattr(tokenizer, attr, tokenizer.convert_ids_to_tokens(token_id))
    return tokenizer
