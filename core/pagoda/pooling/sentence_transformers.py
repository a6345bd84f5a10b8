"""What a sentence-transformers checkpoint says about its embeddings: the modules listed
in modules.json (Transformer, Pooling, Normalize), the pooling mode in the Pooling
module's config.json, and the longest input in sentence_bert_config.json.

A module or a pooling mode this engine does not implement is an error naming it: an
embedding computed without it would silently differ from the model's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODULES_FILE = "modules.json"

_POOLING_MODES = {"mean": "mean", "cls": "cls", "lasttoken": "last"}
"""sentence-transformers' pooling modes we implement, and our names for them."""
_LEGACY_MODE_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                     "pooling_mode_max_tokens": "max",
                     "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens": "weightedmean",
                     "pooling_mode_lasttoken": "lasttoken"}
"""The boolean keys older Pooling configs use instead of `pooling_mode`."""


@dataclass(frozen=True)
class SentenceTransformersConfig:
    pooling: str | None
    """"mean", "cls" or "last"; None when the checkpoint has no Pooling module."""
    normalize: bool
    """Whether a Normalize module scales embeddings to unit length."""
    max_seq_length: int | None
    """Longest input in tokens (sentence_bert_config.json), if it says."""


def read_sentence_transformers_config(path: str | Path) -> SentenceTransformersConfig | None:
    """The checkpoint directory's sentence-transformers config; None without modules.json.
    ValueError for a module or pooling mode this engine does not implement."""
    path = Path(path)
    modules_file = path / MODULES_FILE
    if not path.is_dir() or not modules_file.is_file():
        return None
    pooling, normalize = None, False
    for module in _read_json(modules_file):
        kind = str(module.get("type", "")).rpartition(".")[2]
        if kind == "Transformer":
            continue
        if kind == "Normalize":
            normalize = True
        elif kind == "Pooling":
            pooling = _pooling_mode(path / module.get("path", "") / "config.json")
        else:
            raise ValueError(f"{modules_file}: module {module.get('type')!r} is not supported "
                             "(supported: Transformer, Pooling, Normalize)")
    bert_config = path / "sentence_bert_config.json"
    max_len = _read_json(bert_config).get("max_seq_length") if bert_config.is_file() else None
    return SentenceTransformersConfig(pooling, normalize,
                                      max_len if isinstance(max_len, int) else None)


def _pooling_mode(config_file: Path) -> str:
    config = _read_json(config_file)
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [name for key, name in _LEGACY_MODE_KEYS.items() if config.get(key)]
        mode = modes[0] if len(modes) == 1 else modes
    if not isinstance(mode, str) or mode not in _POOLING_MODES:
        raise ValueError(f"{config_file}: pooling mode {mode!r} is not supported (supported: "
                         f"{', '.join(_POOLING_MODES)})")
    if config.get("include_prompt", True) is not True:
        raise ValueError(f"{config_file}: include_prompt false is not supported")
    return _POOLING_MODES[mode]


def _read_json(path: Path) -> Any:
    with path.open() as f:
        return json.load(f)
