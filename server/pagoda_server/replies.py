"""A reply's text into its parts: thinking, content and tool calls, whole or streamed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pagoda.reasoning import ReasoningParser
from pagoda.tools import ToolCall, ToolCallDelta
from pagoda.tools.parsers import ToolParser


@dataclass
class Reply:
    reasoning: str | None
    content: str | None
    tool_calls: list[ToolCall]


@dataclass
class ReplyDelta:
    """What new output text adds; each call's first delta has its id and name."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[tuple[str, ToolCallDelta]] = field(default_factory=list)
    """(call id, delta) pairs."""

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)


class ReplyFormat:
    """How a request's outputs are read: the thinking first (with a reasoning parser), then
    tool calls in the content (when the request offered tools)."""

    def __init__(self, reasoning: ReasoningParser | None, in_reasoning: bool,
                 tools: ToolParser | None):
        self.reasoning = reasoning
        self.in_reasoning = in_reasoning
        self.tools = tools

    def parse(self, text: str) -> Reply:
        thinking, content = (self.reasoning.split(text, self.in_reasoning)
                             if self.reasoning else (None, text))
        calls: list[ToolCall] = []
        if self.tools is not None and content:
            extracted = self.tools.extract(content)
            content = extracted.content
            calls = [dataclasses.replace(c, id=self.tools.new_call_id())
                     for c in extracted.calls]
        return Reply(thinking, content or None, calls)

    def stream(self) -> ReplyStream:
        return ReplyStream(self)


class ReplyStream:
    """One output's parts as its text grows."""

    def __init__(self, reply_format: ReplyFormat):
        self._tool_parser = reply_format.tools
        self._reasoning = (reply_format.reasoning.stream(reply_format.in_reasoning)
                           if reply_format.reasoning else None)
        self._tools = reply_format.tools.stream() if reply_format.tools else None
        self._ids: dict[int, str] = {}
        self.called = False
        """Some tool call has begun."""

    def feed(self, text: str, final: bool = False) -> ReplyDelta:
        """`text`: the output's new text since the last feed; `final`: no more comes."""
        thinking, content = self._reasoning.feed(text, final) if self._reasoning else ("", text)
        if self._tools is None:
            return ReplyDelta(thinking, content)
        delta = self._tools.feed(content, final)
        calls = []
        for call in delta.tool_calls:
            if call.index not in self._ids:
                assert self._tool_parser is not None
                self._ids[call.index] = self._tool_parser.new_call_id()
            calls.append((self._ids[call.index], call))
        self.called = self.called or bool(calls)
        return ReplyDelta(thinking, delta.content, calls)
