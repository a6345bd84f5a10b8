"""The scheduler's side of a draft model: it reserves the draft positions of a
speculative request's decode step; the worker's draft model fills them on the device
(`pagoda.worker.draft_runner`), so the scheduler never sees the draft tokens themselves."""

from __future__ import annotations

from pagoda.engine.request import PLACEHOLDER_TOKEN_ID


class DraftModelSlots:
    """Proposes `k` placeholder drafts (at most `limit`), whatever the tokens: the draft
    model's guesses are made where its KV cache lives."""

    def __init__(self, k: int):
        self.k = k

    def propose(self, token_ids: list[int], limit: int | None = None,
                owner: object | None = None) -> list[int]:
        """`k` (or `limit`, if fewer) `PLACEHOLDER_TOKEN_ID`s (the tokens and their owner
        are the n-gram proposer's business)."""
        return [PLACEHOLDER_TOKEN_ID] * (self.k if limit is None else max(0, min(self.k, limit)))
