"""Prompt lookup: draft tokens copied from the request's own text.

Outputs often repeat spans of their prompt (code edits, quotes, summaries) or of
themselves. If the last n tokens occurred earlier, the tokens that followed that
occurrence are a free guess at what comes next; the model verifies the guess in one step.
"""

from __future__ import annotations

import numpy as np


class NgramProposer:
    """Proposes up to `k` tokens: those after the latest earlier occurrence of the last n
    tokens, n tried from `max_n` down to `min_n` (a longer match is a better guess)."""

    def __init__(self, k: int, min_n: int, max_n: int):
        self.k = k
        self.min_n = min_n
        self.max_n = max_n

    def propose(self, token_ids: list[int], limit: int | None = None) -> list[int]:
        """Draft tokens to follow `token_ids` (at most `limit`, default `k`); [] when no
        n-gram of the allowed sizes recurs."""
        k = self.k if limit is None else min(self.k, limit)
        if k <= 0 or len(token_ids) <= self.min_n:
            return []
        tokens = np.asarray(token_ids, dtype=np.int64)
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            start = _latest_match(tokens, n)
            if start is not None:
                return tokens[start + n : start + n + k].tolist()
        return []


def _latest_match(tokens: np.ndarray, n: int) -> int | None:
    """The start of the latest occurrence of tokens[-n:] that ends before the last token."""
    suffix = tokens[-n:]
    windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)
    hits = np.flatnonzero((windows == suffix).all(axis=1))
    return int(hits[-1]) if hits.size else None
