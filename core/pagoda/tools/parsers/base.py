"""The tool-parser contract, and the machinery every format's incremental parser shares.

A format's `ToolCallStream` reads the output as it grows and reports plain text and pieces
of calls; `ToolParser.extract` is that same stream fed the whole output at once, so the two
cannot disagree on a well-formed output.

Arguments are the exact text the model wrote for the arguments object (not re-serialized),
both streamed and extracted; the one exception is arguments the model wrote as a JSON
string holding the object, which are that string's decoded text.

Malformed output (call text that is not JSON, a name that is not a string, output cut off
inside a call): `extract` returns the whole output as content and no calls. The stream
holds a call back until its name is complete and its arguments have begun (that call is
then "committed"); if a call breaks before that, the stream emits the text it held back as
content, so its total equals `extract`'s. If a committed call breaks (typically: output
cut off by max_tokens inside the arguments), what was streamed of it stays, and the text
from the first character that broke it onward comes as content; `extract` still returns
the whole output as content. After a break everything is content.
"""

from __future__ import annotations

import json
import secrets
import string
from abc import ABC, abstractmethod
from typing import ClassVar

from pagoda.tools.json_scan import WHITESPACE
from pagoda.tools.types import (
    ExtractedToolCalls,
    FunctionTool,
    StreamDelta,
    ToolCall,
    ToolCallDelta,
)

_ID_ALPHABET = string.ascii_letters + string.digits


class MalformedCall(Exception):
    """The output's call text cannot be parsed; `at` is the offending character's index."""

    def __init__(self, at: int) -> None:
        super().__init__(at)
        self.at = at


class PendingCall:
    """One call as far as it has been read."""

    def __init__(self, start: int) -> None:
        self.start = start
        """Where the call's text (with its markers) begins in the output."""
        self.name: str | None = None
        self.arguments = ""
        """The arguments' JSON text read so far (whole once `complete`)."""
        self.committed = False
        """Its name is complete and its arguments have begun: it is streamed from now on."""
        self.complete = False


class StrippedText:
    """Emits plain text in pieces whose concatenation is the whole text stripped of
    surrounding whitespace (whitespace is held until text follows it)."""

    def __init__(self) -> None:
        self._started = False
        self._held = ""

    def push(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        text = self._held + text
        out = text.rstrip()
        self._held = text[len(out) :]
        return out


def random_id(length: int) -> str:
    """`length` random ASCII letters and digits."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def partial_marker(text: str, pos: int, marker: str) -> int:
    """The length of the longest end of `text[pos:]` that a `marker` could still complete."""
    for k in range(min(len(marker) - 1, len(text) - pos), 0, -1):
        if marker.startswith(text[len(text) - k :]):
            return k
    return 0


def skip_whitespace(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in WHITESPACE:
        pos += 1
    return pos


def expect_marker(text: str, pos: int, marker: str, final: bool) -> bool | None:
    """Whether `marker` is at `pos`: True, False, or None while more text may still decide."""
    if text.startswith(marker, pos):
        return True
    rest = text[pos:]
    if not final and marker.startswith(rest):
        return None
    return False


def tool_json(tool: FunctionTool) -> str:
    """A tool as OpenAI's `{"type": "function", "function": {...}}` JSON, for prompts."""
    function = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    return json.dumps({"type": "function", "function": function}, ensure_ascii=False)


def arguments_object(call: ToolCall) -> str:
    """A call's arguments text, checked to be a JSON object (for rendering calls back)."""
    try:
        value = json.loads(call.arguments)
    except ValueError as e:
        raise ValueError(f"tool call {call.name!r}: arguments are not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"tool call {call.name!r}: arguments are not a JSON object")
    return call.arguments.strip()


class ToolCallStream(ABC):
    """Parses one output incrementally: feed it the new text as it is generated."""

    def __init__(self) -> None:
        self._text = ""
        self._pos = 0
        """How far the output has been read."""
        self._final = False
        self._content = StrippedText()
        self._delta = StreamDelta()
        self._call: PendingCall | None = None
        """The latest call begun."""
        self._segment_start = 0
        """Where the text a break turns back into content begins, when no call is begun."""
        self._sent: PendingCall | None = None
        self._calls_sent = 0
        self._args_sent = 0
        self._plain_from: int | None = None
        self.failed = False
        """The output's call text broke; everything from there on is content."""

    def feed(self, text: str, final: bool = False) -> StreamDelta:
        """`text`: the output's new text since the last feed; `final`: no more text comes."""
        if self._final:
            raise ValueError("this tool-call stream has had its final feed")
        self._text += text
        self._final = final
        self._delta = StreamDelta()
        if self._plain_from is None:
            try:
                self._advance(self._text, final)
            except MalformedCall as e:
                self._break(e.at)
        if self._plain_from is not None:
            self._emit_content(self._text[self._plain_from :])
            self._plain_from = len(self._text)
        return self._delta

    @abstractmethod
    def _advance(self, text: str, final: bool) -> None:
        """Reads `text` (the whole output so far) from `self._pos` as far as it can.

        Raises MalformedCall when the call text breaks, and when `final` leaves a call open.
        """

    def _emit_content(self, text: str) -> None:
        self._delta.content += self._content.push(text)

    def _plain(self, start: int) -> None:
        """From `start` on, the output is plain text."""
        self._plain_from = start
        self._pos = len(self._text)

    def _sync(self, call: PendingCall) -> None:
        """Emits what is new of a committed call."""
        if not call.committed:
            return
        deltas = self._delta.tool_calls
        if call is not self._sent:
            self._sent = call
            self._calls_sent += 1
            self._args_sent = 0
            deltas.append(ToolCallDelta(self._calls_sent - 1, call.name, ""))
        piece = call.arguments[self._args_sent :]
        if piece:
            if not deltas or deltas[-1].index != self._calls_sent - 1:
                deltas.append(ToolCallDelta(self._calls_sent - 1, None, ""))
            deltas[-1].arguments += piece
            self._args_sent = len(call.arguments)

    def _break(self, at: int) -> None:
        self.failed = True
        call = self._call
        if call is not None and call.committed:
            self._sync(call)
            self._plain(at)
        else:
            self._plain(call.start if call is not None else self._segment_start)


class ToolParser(ABC):
    """One format of tool calls: parsing a model's output, and prompting for the format."""

    name: ClassVar[str]
    grammar_format: ClassVar[str]
    """The structural-tag format the grammar side builds for this parser."""
    markers: ClassVar[tuple[str, ...]]
    """The format's marker texts (which the output's text must keep: where a tokenizer
    has them as special tokens, they are decoded too)."""

    @abstractmethod
    def stream(self) -> ToolCallStream:
        """A fresh incremental parser for one output."""

    def extract(self, text: str) -> ExtractedToolCalls:
        """A whole output's plain text and calls (the whole output as content if malformed)."""
        stream = self.stream()
        delta = stream.feed(text, final=True)
        if stream.failed:
            return ExtractedToolCalls(text.strip() or None, [])
        calls: list[ToolCall] = []
        for piece in delta.tool_calls:
            if piece.name is not None:
                calls.append(ToolCall(piece.name, piece.arguments))
            else:
                last = calls[-1]
                calls[-1] = ToolCall(last.name, last.arguments + piece.arguments)
        return ExtractedToolCalls(delta.content or None, calls)

    def new_call_id(self) -> str:
        return "call_" + random_id(24)

    @abstractmethod
    def tools_system_prompt(self, tools: list[FunctionTool]) -> str:
        """Tells the model the tools and the exact call format (for chat templates that do
        not render tools themselves)."""

    @abstractmethod
    def render_calls(self, calls: list[ToolCall]) -> str:
        """An earlier assistant turn's calls, as the model would have written them."""

    @abstractmethod
    def render_result(self, content: str, call: ToolCall | None) -> str:
        """A tool's result as text for a user turn."""
