"""Prompt lookup: draft tokens copied from the request's own text.

Outputs often repeat spans of their prompt (code edits, quotes, summaries) or of
themselves. If the last n tokens occurred earlier, the tokens that followed that
occurrence are a free guess at what comes next; the model verifies the guess in one step.

A request's tokens are kept as 4-byte words, extended by the tokens each step appends, so
a lookup is C's substring search over them (`bytearray.rfind`), not a Python or NumPy
pass over the whole context every step.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from weakref import WeakKeyDictionary


class NgramProposer:
    """Proposes up to `k` tokens: those after the latest earlier occurrence of the last n
    tokens, n tried from `max_n` down to `min_n` (a longer match is a better guess)."""

    def __init__(self, k: int, min_n: int, max_n: int):
        self.k = k
        self.min_n = min_n
        self.max_n = max_n
        self._texts: WeakKeyDictionary[object, TokenText] = WeakKeyDictionary()
        """Each owner's tokens so far, dropped with the owner (a finished request)."""

    def propose(self, token_ids: Sequence[int], limit: int | None = None,
                owner: object | None = None) -> list[int]:
        """Draft tokens to follow `token_ids` (at most `limit`, default `k`); [] when no
        n-gram of the allowed sizes recurs. `owner` (a request, whose tokens only grow
        from call to call) keeps the tokens seen so that the next call adds only the new."""
        k = self.k if limit is None else min(self.k, limit)
        if k <= 0 or len(token_ids) <= self.min_n:
            return []
        text = self._text(token_ids, owner)
        for n in range(min(self.max_n, len(token_ids) - 1), self.min_n - 1, -1):
            start = text.latest_match(n)
            if start is not None:
                return list(token_ids[start + n : start + n + k])
        return []

    def _text(self, token_ids: Sequence[int], owner: object | None) -> TokenText:
        text = None if owner is None else self._texts.get(owner)
        if text is None or len(text) > len(token_ids):
            text = TokenText()
            if owner is not None:
                self._texts[owner] = text
        text.extend(token_ids[len(text):])
        return text


class TokenText:
    """A token sequence as native 4-byte words (token ids are below 2**31), searchable for
    n-grams with `bytearray.rfind`."""

    def __init__(self) -> None:
        self._words = bytearray()

    def __len__(self) -> int:
        return len(self._words) // 4

    def extend(self, token_ids: Sequence[int]) -> None:
        self._words += array("i", token_ids).tobytes()

    def latest_match(self, n: int) -> int | None:
        """The start of the latest occurrence of the last n tokens that ends before the last
        token, or None."""
        suffix = self._words[-4 * n:]
        end = len(self._words) - 4  # the occurrence lies within all tokens but the last
        while (at := self._words.rfind(suffix, 0, end)) >= 0:
            if at % 4 == 0:
                return at // 4
            end = at + len(suffix) - 1  # straddles two words: look before it
        return None
