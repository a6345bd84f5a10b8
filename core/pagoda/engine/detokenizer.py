"""Incremental detokenization: text grows token by token without re-decoding everything
and without emitting half of a multi-byte character or a wrong leading space."""

from __future__ import annotations

from typing import Any

_CONTEXT_TOKENS = 5  # prompt tokens decoded with the output so spacing comes out right


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, prompt_token_ids: list[int], skip_special_tokens: bool = True,
                 spaces_between_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.ids = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(
            ids, skip_special_tokens=self.skip_special_tokens,
            spaces_between_special_tokens=self.spaces_between_special_tokens,
        )

    def add_token(self, token_id: int) -> str:
        """Append a token; return the text it completes (possibly empty for now)."""
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix_offset : self.read_offset])
        after = self._decode(self.ids[self.prefix_offset :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""  # an incomplete character or a token with no text yet
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.ids)
        return after[len(before) :]
