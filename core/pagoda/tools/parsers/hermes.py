"""Hermes tool calls (Hermes 2 Pro, Qwen2.5, Qwen3): `<tool_call>{"name": ..., "arguments":
{...}}</tool_call>` blocks, usually on lines of their own, after any text."""

from __future__ import annotations

import json

from pagoda.tools.parsers.base import (
    MalformedCall,
    ToolCallStream,
    ToolParser,
    arguments_object,
    expect_marker,
    partial_marker,
    skip_whitespace,
    tool_json,
)
from pagoda.tools.parsers.call_object import CallObject
from pagoda.tools.types import FunctionTool, ToolCall

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"


class HermesToolParser(ToolParser):
    name = "hermes"
    grammar_format = "hermes"
    markers = (CALL_START, CALL_END)

    def stream(self) -> ToolCallStream:
        return _HermesStream()

    def tools_system_prompt(self, tools: list[FunctionTool]) -> str:
        listed = "\n".join(tool_json(tool) for tool in tools)
        return (
            "# Tools\n\n"
            "You can call functions to help with the user's request. Their definitions, one "
            f"JSON object per line, are between <tools> and </tools>:\n<tools>\n{listed}\n</tools>"
            "\n\nTo call a function, write a JSON object with its name and its arguments "
            "between <tool_call> and </tool_call> tags, one call per pair of tags:\n"
            '<tool_call>\n{"name": <function name>, "arguments": <arguments as a JSON object>}'
            "\n</tool_call>"
        )

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "\n".join(
            f'{CALL_START}\n{{"name": {json.dumps(call.name, ensure_ascii=False)}, '
            f'"arguments": {arguments_object(call)}}}\n{CALL_END}'
            for call in calls
        )

    def render_result(self, content: str, call: ToolCall | None) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"


class _HermesStream(ToolCallStream):
    def __init__(self) -> None:
        super().__init__()
        self._state = "text"
        self._object: CallObject | None = None

    def _advance(self, text: str, final: bool) -> None:
        while True:
            if self._state == "text":
                start = text.find(CALL_START, self._pos)
                if start < 0:
                    end = len(text) - (0 if final else partial_marker(text, self._pos, CALL_START))
                    self._emit_content(text[self._pos : end])
                    self._pos = end
                    return
                self._emit_content(text[self._pos : start])
                self._call = self._object = CallObject(start)
                self._pos = start + len(CALL_START)
                self._state = "call"
            elif self._state == "call":
                assert self._object is not None
                self._pos = self._object.step(text, self._pos, final)
                self._sync(self._object)
                if not self._object.complete:
                    return
                self._state = "end"
            else:
                self._pos = skip_whitespace(text, self._pos)
                found = expect_marker(text, self._pos, CALL_END, final)
                if found is None:
                    return
                if final and CALL_END.startswith(text[self._pos:]):
                    self._pos = len(text)  # an end marker missing or cut short at the very
                    return  # end is tolerated
                if not found:
                    raise MalformedCall(self._pos)
                self._pos += len(CALL_END)
                self._state = "text"
