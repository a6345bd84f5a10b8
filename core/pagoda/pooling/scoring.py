"""Scoring text pairs, as `LLM.score` and the server's /score and /rerank do it: which
pairs a request means, and how a bi-encoder (an embedding model) scores one."""

from __future__ import annotations

import math
from collections.abc import Sequence


def score_pairs(text_1: str | Sequence[str],
                text_2: str | Sequence[str]) -> list[tuple[str, str]]:
    """The pairs to score: one text_1 against each text_2, or text_1[i] against
    text_2[i]; ValueError naming the field for lists that do not pair up."""
    first = [text_1] if isinstance(text_1, str) else list(text_1)
    second = [text_2] if isinstance(text_2, str) else list(text_2)
    if not first or not second:
        raise ValueError(f"{'text_1' if not first else 'text_2'} must not be empty")
    if len(first) == 1:
        first = first * len(second)
    if len(first) != len(second):
        raise ValueError(f"text_2 must hold one text or as many as text_1 ({len(first)}), "
                         f"got {len(second)}")
    return list(zip(first, second, strict=True))


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """How a bi-encoder scores a pair: the cosine of the angle between the embeddings."""
    norms = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    return math.fsum(x * y for x, y in zip(a, b, strict=True)) / norms if norms else 0.0
