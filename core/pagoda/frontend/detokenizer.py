"""Incremental detokenization: text grows token by token without re-decoding everything
and without emitting half of a multi-byte character or a wrong leading space.

Each step decodes a short window of recent tokens twice: the part already read (the
prefix) and the whole window; the text the new token completes is what the second adds
to the first. A fast tokenizer whose decode is exactly its `tokenizers.Tokenizer`'s does
this in Rust (`tokenizers.decoders.DecodeStream`, the same algorithm); any other
tokenizer, and a request whose stream fails, does it here with `tokenizer.decode`.
"""

from __future__ import annotations

import weakref
from typing import Any

from tokenizers import Tokenizer

try:
    from tokenizers.decoders import DecodeStream
except ImportError:  # tokenizers < 0.21
    DecodeStream = None

_CONTEXT_TOKENS = 5  # prompt tokens decoded with the output so spacing comes out right


class IncrementalDetokenizer:
    """One completion's text, one token at a time."""

    def __init__(self, tokenizer: Any, prompt_token_ids: list[int], skip_special_tokens: bool = True,
                 spaces_between_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.ids = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self._backend = _known_backend(tokenizer)
        self._stream = self._open_stream() if self._backend is not None else None

    def _open_stream(self) -> Any:
        """A DecodeStream primed with the prompt context, or None where it would not match
        `_decode_step`: a context ending in an incomplete character (the stream would
        re-read it as output), or a tokenizers release whose stream takes no context."""
        context_text = self._backend.decode(self.ids, skip_special_tokens=self.skip_special_tokens)
        if context_text.endswith("\ufffd"):
            return None
        try:
            return DecodeStream(ids=self.ids, skip_special_tokens=self.skip_special_tokens)
        except TypeError:
            return None

    def add_token(self, token_id: int) -> str:
        """Append a token; return the text it completes (possibly empty for now)."""
        self.ids.append(token_id)
        if self._stream is not None:
            try:
                text = self._stream.step(self._backend, token_id)
            except Exception:  # e.g. a decoder whose text is not prefix-stable: do it here
                self._stream = None
            else:
                if text is None:
                    return ""
                self.prefix_offset = self.read_offset
                self.read_offset = len(self.ids)
                return text
        return self._decode_step()

    def _decode_step(self) -> str:
        before = self._decode(self.ids[self.prefix_offset : self.read_offset])
        after = self._decode(self.ids[self.prefix_offset :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""  # an incomplete character or a token with no text yet
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.ids)
        return after[len(before) :]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(
            ids, skip_special_tokens=self.skip_special_tokens,
            spaces_between_special_tokens=self.spaces_between_special_tokens,
        )


_BACKENDS: weakref.WeakKeyDictionary[Any, Tokenizer | None] = weakref.WeakKeyDictionary()


def _known_backend(tokenizer: Any) -> Tokenizer | None:
    """`streaming_backend(tokenizer)`, worked out once per tokenizer (every request asks)."""
    try:
        return _BACKENDS[tokenizer]
    except KeyError:
        backend = _BACKENDS[tokenizer] = streaming_backend(tokenizer)
        return backend
    except TypeError:  # not weakly referenceable
        return streaming_backend(tokenizer)


def streaming_backend(tokenizer: Any) -> Tokenizer | None:
    """The `tokenizers.Tokenizer` behind `tokenizer` when `tokenizer.decode` returns exactly
    what it decodes (so a DecodeStream over it yields the same text), else None.

    That holds for transformers' fast tokenizers, which pass decoding to the backend and
    ignore `spaces_between_special_tokens`, unless their class overrides decoding or they
    clean up tokenization spaces (" ." -> ".") afterwards.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if DecodeStream is None or not isinstance(backend, Tokenizer):
        return None
    from transformers import PreTrainedTokenizerFast

    cls = type(tokenizer)
    if cls.decode is not PreTrainedTokenizerFast.decode or \
            cls._decode is not PreTrainedTokenizerFast._decode:
        return None
    if getattr(tokenizer, "clean_up_tokenization_spaces", False):
        # transformers >= 5 skips the clean-up after a BPE model unless told not to
        forced = getattr(tokenizer, "clean_up_tokenization_spaces_for_bpe_even_though_it_will"
                                    "_corrupt_output", None)
        if forced is None or forced or type(backend.model).__name__ != "BPE":
            return None
    return backend
