"""Where a JSON value ends, in text that arrives in pieces.

Tool-call parsers stream a call's arguments while the model writes them, so they must know,
character by character, whether the arguments value has ended yet. The scanner tracks just
enough (strings, escapes, bracket nesting) for that; `json.loads` validates the value once
it is whole.
"""

from __future__ import annotations

import re

WHITESPACE = " \t\n\r"
_STRING_SPECIAL = re.compile(r'["\\]')
_SCALAR_CHARS = frozenset("0123456789+-.eEtrufalsn")
_CLOSERS = {"{": "}", "[": "]"}


class JsonValueScanner:
    """Consumes one JSON value from its first character (no leading whitespace).

    `scan` may be called again with more text; `done` says the value ended, `error` that a
    character cannot belong to a JSON value here. A number or literal at the top level has
    no end of its own; callers that scan one must decide at the next delimiter themselves
    (the scanner reports it done just before that delimiter).
    """

    def __init__(self) -> None:
        self._closers: list[str] = []
        self._in_string = False
        self._escape = False
        self._in_scalar = False
        self.done = False
        self.error = False

    def scan(self, text: str, pos: int) -> int:
        """Consumes `text[pos:]` up to the value's end; returns the index after the last
        character consumed (the offending character's index when `error` is set)."""
        n = len(text)
        while pos < n and not (self.done or self.error):
            if self._in_string:
                pos = self._scan_string(text, pos)
                continue
            c = text[pos]
            if self._in_scalar:
                if c in _SCALAR_CHARS:
                    pos += 1
                    continue
                self._in_scalar = False
                if not self._closers:
                    self.done = True
                    return pos
            if c == '"':
                self._in_string = True
            elif c in _CLOSERS:
                self._closers.append(_CLOSERS[c])
            elif c in "}]":
                if not self._closers or self._closers.pop() != c:
                    self.error = True
                    return pos
                self.done = not self._closers
            elif c in _SCALAR_CHARS:
                self._in_scalar = True
            elif not (self._closers and (c in WHITESPACE or c in ",:")):
                self.error = True
                return pos
            pos += 1
        return pos

    def _scan_string(self, text: str, pos: int) -> int:
        if self._escape:
            self._escape = False
            return pos + 1
        match = _STRING_SPECIAL.search(text, pos)
        if match is None:
            return len(text)
        if match.group() == "\\":
            self._escape = True
        else:
            self._in_string = False
            self.done = not self._closers
        return match.end()
