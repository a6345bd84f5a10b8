"""One call written as a JSON object, `{"name": "f", "arguments": {...}}`, read as it grows.

Hermes, Llama 3 JSON and Mistral's array form all write calls this way. Keys may come in
any order; "parameters" is accepted for "arguments" (Llama 3's word); other keys are
skipped; arguments written as a JSON string holding the object are decoded; missing or
null arguments are `{}`.
"""

from __future__ import annotations

import json

from pagoda.tools.json_scan import WHITESPACE, JsonValueScanner
from pagoda.tools.parsers.base import MalformedCall, PendingCall

_NAME_KEY = "name"
_ARGUMENT_KEYS = ("arguments", "parameters")


class CallObject(PendingCall):
    """A call object from its `{` (after any leading whitespace) to its `}`."""

    def __init__(self, start: int) -> None:
        super().__init__(start)
        self._state = "open"
        self._key: str | None = None
        self._value: JsonValueScanner | None = None
        self._value_start = 0
        self._arguments: str | None = None
        """None before the arguments; "streaming" (an object, streamed as it comes),
        "buffered" (a string or null, decoded once whole) or "read"."""

    def step(self, text: str, pos: int, final: bool) -> int:
        """Reads `text` from `pos` until the object closes or the text ends; returns where
        it stopped. Raises MalformedCall, also when `final` finds the object unclosed."""
        while pos < len(text) and not self.complete:
            if self._state == "value":
                pos = self._scan_value(text, pos)
                continue
            c = text[pos]
            if c in WHITESPACE:
                pos += 1
                continue
            reading_key = self._state in ("first_key", "key") and c == '"'
            if reading_key:
                self._key = None
            if reading_key or self._state == "value_start":
                self._start_value(c, pos)
                continue
            if self._state == "open" and c == "{":
                self._state = "first_key"
            elif self._state == "colon" and c == ":":
                self._state = "value_start"
            elif self._state == "after_value" and c == ",":
                self._state = "key"
            elif self._state in ("first_key", "after_value") and c == "}":
                self._close(pos)
            else:
                raise MalformedCall(pos)
            pos += 1
        if final and not self.complete:
            raise MalformedCall(pos)
        return pos

    def _start_value(self, c: str, pos: int) -> None:
        key = self._key
        if key == _NAME_KEY and c != '"':
            raise MalformedCall(pos)
        if key in _ARGUMENT_KEYS:
            if self._arguments is not None or c not in '{"n':
                raise MalformedCall(pos)
            self._arguments = "streaming" if c == "{" else "buffered"
            self._update_committed()
        self._value = JsonValueScanner()
        self._value_start = pos
        self._state = "value"

    def _scan_value(self, text: str, pos: int) -> int:
        assert self._value is not None
        end = self._value.scan(text, pos)
        if self._arguments == "streaming":
            self.arguments += text[pos:end]
        if self._value.error:
            raise MalformedCall(end)
        if self._value.done:
            self._end_value(text[self._value_start : end], end)
        return end

    def _end_value(self, raw: str, end: int) -> None:
        try:
            value = json.loads(raw)
        except ValueError:
            raise MalformedCall(end) from None
        key = self._key
        if key is None:
            self._key = value
            self._state = "colon"
            return
        self._state = "after_value"
        if key == _NAME_KEY:
            if self.name is not None or not value:
                raise MalformedCall(end)
            self.name = value
        elif key in _ARGUMENT_KEYS:
            self.arguments = _arguments_text(value, raw, end)
            self._arguments = "read"
        self._update_committed()

    def _update_committed(self) -> None:
        """A call is streamed once its name is read and its arguments are streaming (or,
        when they cannot be streamed, read)."""
        self.committed = self.name is not None and self._arguments in ("streaming", "read")

    def _close(self, pos: int) -> None:
        if self.name is None:
            raise MalformedCall(pos)
        if self._arguments is None:
            self.arguments = "{}"
        self.committed = self.complete = True


def _arguments_text(value: object, raw: str, end: int) -> str:
    """The arguments' JSON text, from the value the model wrote for them."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            raise MalformedCall(end) from None
        if isinstance(decoded, dict):
            return value.strip()
    elif isinstance(value, dict):
        return raw
    raise MalformedCall(end)
