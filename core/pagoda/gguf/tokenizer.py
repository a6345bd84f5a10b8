"""The tokenizer and chat template stored in a GGUF file, through transformers."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from pagoda.gguf.fields import GGUFMetadata

_SPECIAL_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


logger = logging.getLogger(__name__)


def _cache_dir(path: Path) -> Path:
    """Where the converted tokenizer of this exact file is kept ($PAGODA_CACHE_DIR)."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    root = Path(os.environ.get("PAGODA_CACHE_DIR", Path.home() / ".cache" / "pagoda"))
    return root / "gguf-tokenizers" / key.hexdigest()[:32]


def cached_tokenizer(path: Path) -> PreTrainedTokenizerBase | None:
    """The tokenizer `load_tokenizer` converted from this exact file before, or None; no
    need to parse the file (its vocabulary alone took 5 s of a 92 MiB GGUF's 6 s parse)."""
    cached = _cache_dir(path)
    if (cached / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    return None


def load_tokenizer(path: Path, meta: GGUFMetadata) -> PreTrainedTokenizerBase:
    """transformers' tokenizer for the GGUF at `path`.

    Converting the GGUF vocabulary takes seconds, so the result is cached on disk per
    file (path, size, modification time). The file's chat template and bos/eos/pad ids
    win over whatever the conversion chose.
    """
    if (tokenizer := cached_tokenizer(path)) is not None:
        return tokenizer
    cached = _cache_dir(path)
    tokenizer = _convert(path, meta)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cached.parent, ignore_cleanup_errors=True) as tmp:
            tokenizer.save_pretrained(tmp)
            os.replace(tmp, cached)
    except OSError as exc:  # read-only home, or another process won the race
        logger.debug("not caching the tokenizer of %s: %s", path, exc)
    return tokenizer


def _convert(path: Path, meta: GGUFMetadata) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    template = meta.get("tokenizer.chat_template")
    if template and tokenizer.chat_template != template:
        tokenizer.chat_template = template
    for attr, key in _SPECIAL_IDS.items():
        token_id = meta.get(key)
        if token_id is not None and getattr(tokenizer, f"{attr}_id") != token_id:
            setattr(tokenizer, attr, tokenizer.convert_ids_to_tokens(token_id))
    return tokenizer
